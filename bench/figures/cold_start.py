"""Figure 1: cold start per handler, against a bare handler making the same AWS calls with the same
SDKs.

A cold start here is: a fresh Python process starts, imports the handler module, and serves one
invocation against the local stack (an in-process `LocalStack`: moto's server with the
template's tables, queues, bucket and a provisioned tenant). What runs is the built artifact
(`.aws-sam/build`, rebuilt here if its sources changed) in `python -I -S` with only the
artifact's folders on sys.path, as Lambda runs it. The baseline is `bench/bare/app.py` on the
same layers: it creates boto3 clients at import, imports the provider SDK the function's adapter
uses (google-cloud-compute, the kubernetes client), and replays the exact AWS calls the handler
made (recorded with a hook on botocore in a separate, untimed run). A second floor, the same bare
handler also importing every library module the handler loaded, runs in the same rounds (handler,
bare, bare + libraries, ...): what is left over it is ours. Medians of fresh processes, after a
warm-up that fills the bytecode and page caches.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.common import REGION, REPO, TEMPLATE, Figure, checkpoint, info, main, median, ratio

TARGET = "<= 1.3"

RUNS = int(os.environ.get("BENCH_COLD_RUNS", "5"))
CHILD = REPO / "bench" / "cold_start_child.py"
BARE = REPO / "bench" / "bare" / "app.py"
UNKNOWN_REQUEST = "pf_" + "0" * 32 + "_1"
# What a bare handler for the same provider imports at module level (what the adapter imports).
PROVIDER_SDK = {"adapter_gcp": "google.cloud.compute_v1", "adapter_kubernetes": "kubernetes.client"}


@dataclass
class Scenario:
    function: str  # code folder under functions/
    what: str  # the first invocation, in words
    event: dict[str, Any]
    paths: tuple[Path, ...] = ()  # the built artifact: the function's folder, then its layers'


def _sqs_event(bodies: list[tuple[str, dict[str, Any]]], queue: str) -> dict[str, Any]:
    from infercrane.local.workers import sqs_event

    messages = [{"MessageId": str(uuid.uuid4()), "ReceiptHandle": "bench", "Body": body,
                 "Attributes": {"ApproximateReceiveCount": "1"},
                 "MessageAttributes": {k: {"DataType": "String", "StringValue": v}
                                       for k, v in attrs.items()}}
                for body, attrs in bodies]
    return sqs_event(messages, f"arn:aws:sqs:{REGION}:123456789012:{queue}", REGION)


def _api_event(stack: Any, method: str, path: str, query: str = "", body: bytes = b"",
               admin: bool = False) -> dict[str, Any]:
    from infercrane.local.gateway import Gateway

    gateway = Gateway(stack.template.routes, {}, stack.template.authorizer, stack.admin_key)
    found = gateway.match(method, path)
    if found is None:
        raise LookupError(f"no route {method} {path} in template.yaml")
    route, params = found
    if admin:
        extra = {"identity": {"userArn": "arn:aws:iam::123456789012:user/bench", "caller": "bench"}}
    else:
        # What the authorizer puts in the request context (its own cold start is measured apart).
        extra = {"authorizer": {"tenant": "demo", "key_id": "bench", "principalId": "demo/bench"}}
    headers = {"content-type": "application/json", "host": "localhost"}
    return gateway.proxy_event(route, params, method, path, query, headers, body, extra)


def scenarios(stack: Any) -> list[Scenario]:
    from infercrane.bootstrap import get_container
    from infercrane.domain import signing

    out: list[Scenario] = []
    key = stack.api_keys["demo"]
    routes = {(r.method, r.path) for r in stack.template.routes}
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    observation = {"observation_id": "bench-cold-1", "deployment": "bench-cold", "arrival": now,
                   "input_tokens": 2048, "output_tokens": 28, "latency_ms": 850.0, "ttft_ms": 120.0,
                   "session_id": "session-1"}
    for function in sorted(p.parent.name for p in (REPO / "functions").glob("*/app.py")):
        if function == "authorizer":
            out.append(Scenario(function, "TOKEN event with a valid API key (one GetItem)", {
                "type": "TOKEN", "authorizationToken": f"Bearer {key}",
                "methodArn": f"arn:aws:execute-api:{REGION}:123456789012:local/prod/GET/v1/traces"}))
        elif function == "api" and ("POST", "/v1/observations") in routes:
            body = json.dumps({"items": [observation]}).encode()
            out.append(Scenario(function, "POST /v1/observations, one observation",
                                _api_event(stack, "POST", "/v1/observations", body=body)))
        elif function == "api":
            out.append(Scenario(function, "GET /v1/traces?deployment=bench-cold",
                                _api_event(stack, "GET", "/v1/traces", "deployment=bench-cold")))
        elif function == "admin":
            out.append(Scenario(function, "GET /v1/admin/dlqs (DLQ depths)",
                                _api_event(stack, "GET", "/v1/admin/dlqs", admin=True)))
        elif function == "capture":
            keys = get_container().capture.keyring("demo")
            message = json.dumps({**observation, "observation_id": "bench-cold-q1",
                                  "session_id": None})
            version, signature = signing.sign(message, keys.ingest)
            out.append(Scenario(function, "SQS batch of one signed observation", _sqs_event(
                [(message, {signing.ATTR_TENANT: "demo", signing.ATTR_KEY_VERSION: version,
                         signing.ATTR_SIGNATURE: signature})], "CaptureQueue")))
        elif function == "prefetch_dispatch":
            out.append(Scenario(function, "SQS message naming an unknown request (one GetItem)",
                                _sqs_event([(json.dumps({"tenant": "demo",
                                                         "request_id": UNKNOWN_REQUEST}), {})],
                                           "PrefetchQueue")))
        elif function == "trace_build":
            out.append(Scenario(function, "SQS message naming an unknown build (one GetItem)",
                                _sqs_event([(json.dumps({"tenant": "demo",
                                                         "build_id": "0" * 32}), {})],
                                           "TraceBuildQueue")))
        elif function == "lifecycle":
            event = json.loads((REPO / "events" / "lifecycle_eventbridge.json").read_text())
            event["detail"]["tenant"] = "demo"
            out.append(Scenario(function, "EventBridge event with two lifecycle attempts", event))
        elif function.startswith("adapter_"):
            provider = function.removeprefix("adapter_")
            location = {"aws": "us-east-1a", "gcp": "us-central1-a"}.get(provider, "cluster-1/ns")
            prefetch = {"schema": "infercrane.prefetch/v1", "action": "prefetch", "tenant": "demo",
                        "request_id": UNKNOWN_REQUEST, "adapter": provider,
                        "model": "sha256:" + hashlib.sha256(b"bench").hexdigest(),
                        "location": location, "source": "snap-0123456789abcdef0"}
            out.append(Scenario(function, "prefetch message for an unknown request (one GetItem)",
                                _sqs_event([(json.dumps(prefetch), {})], f"Adapter{provider}")))
        else:
            from infercrane.local.workers import scheduled_event

            arn = f"arn:aws:events:{REGION}:123456789012:rule/{function}-bench"
            out.append(Scenario(function, "scheduled event", scheduled_event(arn, REGION)))
    return out


def _failed(result: dict[str, Any]) -> str | None:
    if result["error"]:
        return str(result["error"])
    value = result["result"]
    if isinstance(value, dict):
        if value.get("batchItemFailures"):
            return "the handler reported batch item failures"
        status = value.get("statusCode")
        if isinstance(status, int) and status >= 400:
            return f"HTTP {status}: {str(value.get('body'))[:200]}"
    return None


def _import_self_times(stderr: str) -> dict[str, int]:
    """`-X importtime`'s lines (`import time: SELF | CUMULATIVE | NAME`): each module's own µs."""
    times = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            own, _, name = line.removeprefix("import time:").split("|")
            times[name.strip()] = int(own)
    return times


def _package(module: str) -> str:
    """The unit a cost is named by: the top-level package, but Powertools' by utility
    (`aws_lambda_powertools.utilities.batch`) and ours by layer (`infercrane.domain`)."""
    parts = module.split(".")
    depth = {"aws_lambda_powertools": 3, "infercrane": 2}.get(parts[0], 1)
    if parts[0] == "aws_lambda_powertools" and len(parts) > 1 and parts[1] != "utilities":
        depth = 2
    return ".".join(parts[:depth])


def beyond_bare(runs: list[dict[str, Any]], bare: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """The packages the handler loaded (importing or on its first call) that the bare handler did
    not, by their modules' own import time (the least of `runs`, each under `-X importtime`), in ms,
    largest first. Stdlib modules count under their own names: `asyncio` loaded by a library is
    that library's cost too."""
    bare_modules = set().union(*(r["module_names"] for r in bare))
    own: dict[str, int] = {}
    for name in set(runs[0]["import_self_us"]) - bare_modules:
        own[name] = min(r["import_self_us"].get(name, 0) for r in runs)
    by_package = Counter[str]()
    for name, us in own.items():
        by_package[_package(name)] += us
    return [(package, us / 1000) for package, us in by_package.most_common()]


class Runner:
    def __init__(self, env: dict[str, str], tmp: Path):
        self.env, self.tmp = env, tmp

    def run(self, mode: str, handler: Path, event: dict[str, Any], paths: tuple[Path, ...],
            extra_env: dict[str, str] | None = None) -> dict[str, Any]:
        name = uuid.uuid4().hex
        event_path, out_path = self.tmp / f"{name}.event", self.tmp / f"{name}.json"
        # Through JSON first: the event is what Lambda would deliver (plain types only).
        event_path.write_bytes(pickle.dumps(
            event if handler == BARE else json.loads(json.dumps(event))))
        env = {**self.env, **(extra_env or {})}
        err_path = self.tmp / f"{name}.err"
        with err_path.open("wb") as err:
            # -I -S: no site-packages, no PYTHON* variables; only `paths` (the artifact) importable.
            # -B: as on Lambda's read-only folders, only the bytecode the artifact ships is used.
            argv = [sys.executable, "-I", "-S", "-B",
                    *(["-X", "importtime"] if mode == "imports" else []),
                    str(CHILD), mode, str(handler), str(event_path), str(out_path),
                    *(str(p) for p in paths)]
            t_spawn = time.time()
            proc = subprocess.Popen(argv, env=env, cwd=handler.parent,  # noqa: S603 - our own argv
                                    stdout=subprocess.DEVNULL, stderr=err)
            # wait4: the child's own CPU time, which other processes on a shared box do not inflate.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"cold start child failed: {err_path.read_text()[-2000:]}")
        result: dict[str, Any] = json.loads(out_path.read_text())
        result["cpu_s"] = usage.ru_utime + usage.ru_stime
        result["total_s"] = result["t_done"] - t_spawn
        result["startup_s"] = result["t_main"] - t_spawn
        if mode == "imports":
            result["import_self_us"] = _import_self_times(err_path.read_text())
        if mode == "record":
            result["calls"] = pickle.loads((out_path.with_suffix(".json.calls")).read_bytes())  # noqa: S301
        return result


def measure(stack: Any, runner: Runner, sc: Scenario) -> list[Figure]:
    handler = sc.paths[0] / "app.py"
    layers = sc.paths[1:]  # the bare handler gets the function's layers (its SDKs), not its code
    # Untimed: records the AWS calls, and warms the bytecode and page caches. Idempotent events
    # make every later run take the same path.
    recorded = runner.run("record", handler, sc.event, sc.paths)
    problem = _failed(recorded)
    if problem:
        return [info(f"cold start {sc.function}", None, "x", f"first invocation failed: {problem}",
                     target=TARGET)]
    calls = recorded["calls"]
    services = sorted({c[0] for c in calls})
    bare_env = {"BENCH_BARE_SERVICES": ",".join(services),
                "BENCH_BARE_IMPORTS": PROVIDER_SDK.get(sc.function, "")}
    bare_event = {"calls": calls}
    # The second floor: the same bare handler also importing every library module the handler
    # loaded (Powertools, pydantic, pynamodb, ...), none of our code; the provider SDK only if the
    # handler loaded it. The three kinds of run alternate, so drift on a shared machine moves them
    # together instead of tilting one against the others.
    libs_env = {**bare_env, "BENCH_BARE_IMPORTS": ",".join(recorded["libraries"])}
    real, bare, libs = [], [], []
    for _ in range(RUNS):
        real.append(runner.run("time", handler, sc.event, sc.paths))
        bare.append(runner.run("time", BARE, bare_event, layers, bare_env))
        libs.append(runner.run("time", BARE, bare_event, layers, libs_env))

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return median([r[key] for r in rows]) * 1000

    total, bare_total = med(real, "total_s"), med(bare, "total_s")
    counted = Counter(f"{s}.{o}" for s, o, _ in calls)
    ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in counted.items()) or "no AWS calls"
    detail = (f"{sc.what}; {total:.0f} ms vs bare {bare_total:.0f} ms "
              f"(start {med(real, 'startup_s'):.0f} + import {med(real, 'import_s'):.0f} + "
              f"first call {med(real, 'invoke_s'):.0f} ms vs bare import "
              f"{med(bare, 'import_s'):.0f} + call {med(bare, 'invoke_s'):.0f}); CPU "
              f"{med(real, 'cpu_s'):.0f} vs {med(bare, 'cpu_s'):.0f} ms; calls: {ops}")
    fig = ratio(f"cold start {sc.function} vs bare handler", total / bare_total, TARGET, detail,
                  handler_ms=round(total, 1), bare_ms=round(bare_total, 1),
                  import_ms=round(med(real, "import_s"), 1),
                  first_call_ms=round(med(real, "invoke_s"), 1),
                  bare_import_ms=round(med(bare, "import_s"), 1),
                  bare_call_ms=round(med(bare, "invoke_s"), 1),
                  cpu_ratio=round(med(real, "cpu_s") / med(bare, "cpu_s"), 3),
                  cpu_ms=round(med(real, "cpu_s"), 1), bare_cpu_ms=round(med(bare, "cpu_s"), 1),
                  first_call_top=recorded.get("first_call_top", []),
                  modules=real[-1]["modules"], bare_modules=bare[-1]["modules"], calls=ops)
    libs_total, libs_cpu = med(libs, "total_s"), med(libs, "cpu_s")
    # The libraries' share of the CPU over bare, which the other load of a shared machine disturbs
    # less than wall time.
    cpu, bare_cpu = med(real, "cpu_s"), med(bare, "cpu_s")
    share = (libs_cpu - bare_cpu) / (cpu - bare_cpu) if cpu > bare_cpu else None
    fig.extra.update(libs_floor_ms=round(libs_total, 1), libs_floor_cpu_ms=round(libs_cpu, 1),
                     vs_libs_floor=round(total / libs_total, 3),
                     cpu_vs_libs_floor=round(cpu / libs_cpu, 3),
                     libs_share_of_excess=None if share is None else round(share, 3))
    fig.detail += (f"; bare + the same library imports {libs_total:.0f} ms (CPU "
                   f"{libs_cpu:.0f}): handler {total / libs_total:.2f}x that"
                   + (f", libraries {share:.0%} of the CPU over bare" if share else ""))
    if fig.met is False:
        # What ours loads and the bare handler does not, named by package with its own import time
        # (untimed runs under -X importtime): the leading costs of the miss.
        traced = [runner.run("imports", handler, sc.event, sc.paths) for _ in range(2)]
        extra = beyond_bare(traced, bare)
        fig.extra["imports_beyond_bare_ms"] = {p: round(ms, 1) for p, ms in extra[:12]}
        fig.detail += ("; imports beyond bare (own import time): "
                       + ", ".join(f"{p} {ms:.0f} ms" for p, ms in extra[:6]))
        if fig.extra["first_call_top"]:
            fig.detail += "; first call (profiled): " + ", ".join(fig.extra["first_call_top"][:3])
    return [fig]


def run() -> list[Figure]:
    import logging

    from infercrane.local import artifacts
    from infercrane.local.stack import LocalStack

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request lines

    stack = LocalStack(TEMPLATE, tenants=["demo"], run_schedules=False, pool_size=1)
    figures: list[Figure] = []
    with stack, tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
        env.update({
            # Providers outside AWS are configured but never reached on these paths.
            "INFERCRANE_GCP_PROJECT": "bench", "INFERCRANE_GCP_COMPUTE_ENDPOINT": "http://127.0.0.1:9",
            "INFERCRANE_KUBERNETES_ENDPOINT": "http://127.0.0.1:9",
            "PYTHONPATH": "",
        })
        artifacts.build(stack.template)  # what is measured is what ships: the current sources
        built = {spec.short_name: artifacts.artifact(TEMPLATE, spec).paths
                 for spec in stack.template.functions.values()}
        runner = Runner(env, Path(tmp))
        runner.run("time", BARE, {"calls": []}, built["aggregate"][1:],
                   {"BENCH_BARE_SERVICES": "dynamodb"})  # warm-up
        only = [s for s in os.environ.get("BENCH_COLD_ONLY", "").split(",") if s]
        # The request path first: if the group runs out of time, these are measured.
        first = ["api", "authorizer", "capture", "admin"]
        ordered = sorted((replace(s, paths=built[s.function]) for s in scenarios(stack)),
                         key=lambda s: (first.index(s.function) if s.function in first
                                        else len(first), s.function))
        for sc in ordered:
            if only and sc.function not in only:
                continue
            try:
                figures += measure(stack, runner, sc)
            except Exception as exc:  # one broken handler must not hide the others' figures
                figures.append(info(f"cold start {sc.function} vs bare handler", None, "x",
                                    f"not measured: {type(exc).__name__}: {str(exc)[-300:]}",
                                    target=TARGET))
            checkpoint(figures)
    return figures


if __name__ == "__main__":
    main(run)
