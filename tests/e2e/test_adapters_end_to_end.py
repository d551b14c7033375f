"""One prefetch per adapter end to end on the local stack, as a user: `infercrane prefetch
request` -> prefetch_dispatch -> the adapter function on its queue (moto EC2, the GCE and
Kubernetes emulators) -> `infercrane cache status` reads `present` with a read-only plan; then
`infercrane prefetch release` removes what was created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infercrane.local import provider_emulators
from infercrane.local.stack import EXTENSIONS, LocalStack, find_template

BIN = Path(sys.executable).parent / "infercrane"
DIGEST = "sha256:" + "5e" * 32


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    saved_env, saved_ext = dict(os.environ), dict(EXTENSIONS)
    for k in ("INFERCRANE_GCP_COMPUTE_ENDPOINT", "INFERCRANE_GCP_PROJECT",
              "INFERCRANE_KUBERNETES_ENDPOINT"):
        os.environ.pop(k, None)
    provider_emulators.register()
    # moto keeps its state per process, shared by every moto server in it: when this module runs
    # after the integration tier in one pytest process, their tables would already exist.
    from moto.moto_api._internal import moto_api_backend

    moto_api_backend.reset()
    local = LocalStack(find_template(), tenants=["demo"], run_schedules=False, pool_size=2)
    try:
        yield local.start()
    finally:
        local.stop()
        for emulator in provider_emulators.RUNNING.values():
            emulator.stop()
        provider_emulators.RUNNING.clear()
        EXTENSIONS.clear()
        EXTENSIONS.update(saved_ext)
        os.environ.clear()
        os.environ.update(saved_env)


def cli(stack: LocalStack, *args: str) -> Any:
    env = {**os.environ, "INFERCRANE_ENDPOINT": stack.endpoint,
           "INFERCRANE_API_KEY": stack.api_keys["demo"], "NO_COLOR": "1"}
    done = subprocess.run([str(BIN), *args, "--output", "json"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for(stack: LocalStack, adapter: str, location: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        doc = cli(stack, "cache", "status", "--model", DIGEST, "--adapter", adapter,
                  "--location", location)
        found = [o for o in doc["observations"] if o["state"] == state]
        if found or time.monotonic() > deadline:
            assert found, doc
            return found[0]
        time.sleep(0.5)


@pytest.mark.slow
def test_one_prefetch_per_adapter_reads_present_and_release_removes_it(stack):
    sources = provider_emulators.seed_demo_artifacts(DIGEST, stack.aws_endpoint)
    assert set(sources) == {"aws", "gcp", "kubernetes"}
    requests = {}
    for adapter, s in sources.items():
        requests[adapter] = cli(stack, "prefetch", "request", "--model", DIGEST, "--adapter",
                                adapter, "--location", s["location"], "--source", s["source"])
    for adapter, s in sources.items():
        present = wait_for(stack, adapter, s["location"], "present")
        plan = json.loads(present["evidence"]["attach_plan"])
        assert plan["read_only"] is True, adapter
        status = cli(stack, "prefetch", "status", requests[adapter]["id"])
        assert status["status"] == "completed"
    gce = provider_emulators.RUNNING["gce"]
    k8s = provider_emulators.RUNNING["kubernetes"]
    assert gce.inserts == 1
    assert k8s.creates == 1
    for adapter, s in sources.items():
        cli(stack, "prefetch", "release", requests[adapter]["id"])
        wait_for(stack, adapter, s["location"], "missing")
    assert gce.disks == {}
    assert k8s.pvcs == {}
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=stack.aws_endpoint, region_name="us-east-1")
    tagged = ec2.describe_volumes(Filters=[{"Name": "tag-key",
                                            "Values": ["infercrane:prefetch-key"]}])["Volumes"]
    assert [v for v in tagged if v["State"] not in ("deleting", "deleted")] == []
