"""Integration tier: real SDK clients against moto's server, resources created from template.yaml.

`aws` gives each test a clean moto (reset) with the template's tables, queues and bucket, and a
`Container` wired to them exactly as a Lambda function would be.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
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


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    from infercrane.local.kms import honour_digest_signing

    honour_digest_signing()
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


@pytest.fixture
def aws(moto_endpoint: str, stack_template: StackTemplate,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10)
    session = boto3.session.Session(region_name=REGION)
    physical = resources.create(stack_template, session, moto_endpoint, REGION)
    env = resources.environment(stack_template, physical)
    env["INFERCRANE_AWS_ENDPOINT_URL"] = moto_endpoint
    # Handlers loaded by a test see the environment template.yaml gives every function.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.from_env(env)
    container = Container(settings)
    reset_container(container)
    yield AwsStack(moto_endpoint, stack_template, physical, env, settings, container, session)
    reset_container(None)
