"""The local stack's wiring equals what template.yaml declares, read here independently of
infercrane.local.template (plain PyYAML with CloudFormation tags kept as data)."""

from __future__ import annotations

import os

import requests
import yaml

from infercrane.local.stack import LocalStack
from tests.conftest import REPO


class _CfnLoader(yaml.SafeLoader):
    pass


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        return {suffix: value.split(".") if suffix == "GetAtt" else value}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}


_CfnLoader.add_multi_constructor("!", _tag)


def declared():
    doc = yaml.load((REPO / "template.yaml").read_text(), Loader=_CfnLoader)
    routes, queues, schedules = set(), set(), set()
    for lid, res in doc["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        for event in (res["Properties"].get("Events") or {}).values():
            p = event["Properties"]
            if event["Type"] == "Api":
                routes.add((p["Method"].upper(), p["Path"], lid))
            elif event["Type"] == "SQS":
                queues.add((p["Queue"]["GetAtt"][0], lid))
            elif event["Type"] == "Schedule":
                schedules.add((lid, p["Schedule"]))
    return routes, queues, schedules


def test_local_stack_wiring_equals_the_template(moto_endpoint):
    routes, queues, schedules = declared()
    # moto's backends are per process: clear what other tests created, and give the environment
    # back afterwards (the stack points the process's SDKs at its own server).
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10)
    saved = dict(os.environ)
    stack = LocalStack(REPO / "template.yaml", tenants=["demo"], run_schedules=False)
    stack.start()
    try:
        gateway = stack._server.RequestHandlerClass.gateway
        assert {(r.method, r.path, r.function) for r in gateway.routes} == routes
        assert {(p.source.queue, p.source.function) for p in stack.pollers} == queues
        assert all(p.queue_url.endswith(p.source.queue) for p in stack.pollers)
        local_schedules = {(s.function, s.every_s) for s in stack.scheduler.schedules}
        assert {(f, _seconds(expr)) for f, expr in schedules} == local_schedules
        # Ready means warm: every function behind a route, and the authorizer, has started one
        # environment; nothing else has (queue consumers and schedules start on first use).
        fronted = {f for _, _, f in routes} | {stack.template.authorizer}
        assert set(stack.wait_warm()) == fronted
        assert all(stack.pools[lid].warm_environments == 1 for lid in fronted)
    finally:
        stack.stop()
        os.environ.clear()
        os.environ.update(saved)


def _seconds(expression: str) -> float:
    n, unit = expression[len("rate("):-1].split()
    return int(n) * {"minute": 60, "hour": 3600, "day": 86400}[unit.rstrip("s")]


def test_waiting_for_warm_environments_ends_when_the_stack_is_stopping():
    import threading

    # A start still running (an environment's init) and a stop asked for meanwhile: the wait
    # returns at once with nothing warm, rather than after the init (up to its timeout).
    stack = LocalStack(REPO / "template.yaml", tenants=["demo"], run_schedules=False)
    release = threading.Event()
    stack._warming = [threading.Thread(target=release.wait, args=(30,), daemon=True)]
    stack._warming[0].start()
    stopping = threading.Event()
    threading.Timer(0.2, stopping.set).start()
    try:
        assert stack.wait_warm(timeout_s=30, stopping=stopping) == []
        assert stack._warming[0].is_alive()  # it returned while the start still ran
    finally:
        release.set()
