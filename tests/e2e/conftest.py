"""End-to-end tier: `infercrane local serve` in its own process, used through the CLI and HTTP
exactly as a user would. One stack per session; tests isolate themselves by deployment name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent / "infercrane"


@dataclass
class Served:
    endpoint: str
    aws_endpoint: str
    tenants: dict[str, str]
    admin_key: str
    process: subprocess.Popen[bytes]
    # The operator's: the stack's moto authorizes every request (the ready line's).
    aws_credentials: dict[str, str]
    log_path: Path | None = None

    def aws(self, service: str) -> Any:
        """A client of the stack's moto, as its operator, to inspect what the service stored."""
        import boto3

        return boto3.client(service, endpoint_url=self.aws_endpoint, region_name="us-east-1",
                            aws_access_key_id=self.aws_credentials["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.aws_credentials["AWS_SECRET_ACCESS_KEY"])

    def log(self) -> str:
        """What the stack wrote to stderr so far (its functions' output, `denied:` lines)."""
        return self.log_path.read_text("utf-8", "replace") if self.log_path else ""

    def env(self, tenant: str | None = "demo") -> dict[str, str]:
        env = {**os.environ, "INFERCRANE_ENDPOINT": self.endpoint,
               "INFERCRANE_ADMIN_KEY": self.admin_key, "NO_COLOR": "1", "COLUMNS": "200"}
        env.pop("INFERCRANE_API_KEY", None)
        if tenant:
            env["INFERCRANE_API_KEY"] = self.tenants[tenant]
        return env

    def cli(self, *args: str, tenant: str | None = "demo", input_text: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN), *args], env=self.env(tenant), capture_output=True,
                              text=True, input=input_text, timeout=timeout, check=False)

    def cli_json(self, *args: str, tenant: str | None = "demo") -> Any:
        done = self.cli(*args, "--output", "json", tenant=tenant)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def start_served(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Served:
    """`infercrane local serve` with tenants demo and other; `env` adds to this environment."""
    ready = tmp / "ready.json"
    proc = subprocess.Popen(
        [str(BIN), "local", "serve", "--tenant", "demo", "--tenant", "other",
         "--ready-file", str(ready), *extra],
        stdout=subprocess.PIPE, stderr=open(tmp / "serve.log", "wb"),  # noqa: SIM115
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text().endswith("\n"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("local stack did not start:\n" + (tmp / "serve.log").read_text())
        time.sleep(0.05)
    doc = json.loads(ready.read_text())
    return Served(doc["endpoint"], doc["aws_endpoint"], doc["tenants"], doc["admin_key"], proc,
                  doc["aws_credentials"], tmp / "serve.log")


def stop_served(stack: Served) -> None:
    stack.process.send_signal(signal.SIGTERM)
    try:
        stack.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        stack.process.kill()


@contextmanager
def serving(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """A stack of a test module's own (another template, limit or admin mode), stopped after."""
    stack = start_served(tmp, *extra, env=env)
    try:
        yield stack
    finally:
        stop_served(stack)


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One stack per session (per xdist worker); tests isolate themselves by deployment name."""
    with serving(tmp_path_factory.mktemp("stack")) as stack:
        yield stack
