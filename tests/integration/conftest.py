"""Integration tier: real SDK clients against moto's server, resources created from template.yaml.

`aws` gives each test a clean moto with the template's tables, queues, bucket and KMS keys, and a
`Container` wired to them exactly as a Lambda function would be.

Creating those resources over HTTP (tables with GSIs, queues with redrive policies, the signing
key) cost about a second per test. They are created once per worker (pytest-xdist runs one
process per worker, each with its own moto server) and moto's in-process backends are
snapshotted; before each test moto is reset and the snapshot copied back. Every test therefore
starts from exactly the state `resources.create` leaves — empty tables and queues, nothing another
test wrote — as it did when each test recreated them.
"""

from __future__ import annotations

import copy
import copyreg
import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
import requests

from infercrane.bootstrap import Container, reset_container
from infercrane.local import resources
from infercrane.local.template import StackTemplate, load
from infercrane.settings import Settings

REGION = "us-east-1"


@dataclass
class AwsStack:
    endpoint: str
    template: StackTemplate
    physical: resources.Physical
    env: dict[str, str]
    settings: Settings
    container: Container
    session: Any

    def client(self, service: str) -> Any:
        return self.session.client(service, endpoint_url=self.endpoint, region_name=REGION)


@pytest.fixture(scope="session", autouse=True)
def shared_sdk_models() -> Iterator[None]:
    """Every `boto3.session.Session()` (the Container makes one per client, as a Lambda's cold
    start does) parses the service's JSON model again: ~0.3 s per test here. One loader for the
    test process reads each model once; what the clients do is unchanged."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(botocore.session, "create_loader",
                   functools.lru_cache(maxsize=None)(botocore.session.create_loader))
        yield


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    from infercrane.local import moto_atomic
    from infercrane.local.kms import honour_digest_signing

    honour_digest_signing()
    moto_atomic.install()  # the race tests need conditional writes as atomic as AWS's
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": endpoint})
    yield endpoint
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def stack_template(template_path: Path) -> StackTemplate:
    return load(template_path)


@contextmanager
def _locks_copied_as_new_locks() -> Iterator[None]:
    # moto's models hold locks and conditions (deepcopy refuses locks, and would leave a copied
    # condition bound to the original's lock); a copied model gets fresh, unheld ones.
    kinds: dict[type, Any] = {
        type(threading.Lock()): lambda _lock: (threading.Lock, ()),
        type(threading.RLock()): lambda _lock: (threading.RLock, ()),
        threading.Condition: lambda cond: (threading.Condition, (cond._lock,)),
    }
    for kind, reduce in kinds.items():
        copyreg.pickle(kind, reduce)
    try:
        yield
    finally:
        for kind in kinds:
            copyreg.dispatch_table.pop(kind, None)


class MotoSnapshot:
    """moto's backends (this process's, which the ThreadedMotoServer serves) as they are now."""

    def __init__(self) -> None:
        from moto.core.base_backend import BackendDict

        with _locks_copied_as_new_locks():
            self._saved = [(services, account, region, copy.deepcopy(backend))
                           for services in BackendDict._instances
                           for account, regional in services.items()
                           for region, backend in regional.items()]

    def restore(self, endpoint: str) -> None:
        """moto's own reset (everything any test created, in any service, is gone), then a copy
        of each saved backend put back in its place."""
        from moto.core.base_backend import backend_lock

        requests.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
        with backend_lock, _locks_copied_as_new_locks():
            for services, account, region, backend in self._saved:
                services[account][region] = copy.deepcopy(backend)


@dataclass(frozen=True)
class TemplateResources:
    physical: resources.Physical
    env: dict[str, str]
    snapshot: MotoSnapshot
    session: Any


@pytest.fixture(scope="session")
def template_resources(moto_endpoint: str, stack_template: StackTemplate) -> TemplateResources:
    """The template's resources, created once per worker; `aws` restores them for each test."""
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10).raise_for_status()
    session = boto3.session.Session(region_name=REGION)
    physical = resources.create(stack_template, session, moto_endpoint, REGION)
    env = resources.environment(stack_template, physical)
    env["INFERCRANE_AWS_ENDPOINT_URL"] = moto_endpoint
    return TemplateResources(physical, env, MotoSnapshot(), session)


@pytest.fixture
def aws(moto_endpoint: str, stack_template: StackTemplate, template_resources: TemplateResources,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    template_resources.snapshot.restore(moto_endpoint)
    env = dict(template_resources.env)
    # Handlers loaded by a test see the environment template.yaml gives every function.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.from_env(env)
    container = Container(settings)
    reset_container(container)
    yield AwsStack(moto_endpoint, stack_template, copy.deepcopy(template_resources.physical), env,
                   settings, container, template_resources.session)
    reset_container(None)
