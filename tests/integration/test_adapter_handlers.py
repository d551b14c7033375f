"""The three adapter functions with the events/*.json that `sam local invoke` uses: Powertools
batch processing consumes the poison record (retrying it could only move it into the DLQ) and
works the valid record through the container's production wiring."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infercrane.bootstrap import Container, reset_container
from infercrane.domain.prefetch import adapter_message
from infercrane.domain.providers.kubernetes import DIGEST_ANNOTATION
from infercrane.domain.providers.model import binding
from tests.conftest import REPO, load_event
from tests.emulators.gce import GceEmulator
from tests.emulators.kubernetes import KubernetesEmulator

DIGEST = "sha256:" + "ab" * 32
CONTEXT = SimpleNamespace(function_name="fn", memory_limit_in_mb=512, aws_request_id="req-1",
                          invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:fn")


def handler(name: str) -> Any:
    path = REPO / "functions" / name / "app.py"
    spec = importlib.util.spec_from_file_location(f"_test_fn_{name}", path)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


def event_for(adapter: str, container: Container, location: str, source: str) -> dict[str, Any]:
    req, _ = container.prefetch.request("demo", DIGEST, adapter, location, source)
    event = load_event(f"adapter_{adapter}_sqs.json")
    template = json.loads(event["Records"][0]["body"])
    assert template["schema"] == "infercrane.prefetch/v1"
    event["Records"][0]["body"] = json.dumps(adapter_message(req, "prefetch"))
    return event


def test_adapter_aws_handler_consumes_the_poison_record_and_works_the_valid_one(aws):
    ec2 = aws.client("ec2")
    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1, Encrypted=True)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol, Description=binding(DIGEST))["SnapshotId"]
    event = event_for("aws", aws.container, "us-east-1a", snap)
    result = handler("adapter_aws")(event, CONTEXT)
    assert result["batchItemFailures"] == []
    [eff] = aws.container.cache.effective("demo", DIGEST, "aws", "us-east-1a")
    assert eff.document()["state"] == "present"


@pytest.mark.parametrize("adapter", ["gcp", "kubernetes"])
def test_adapter_handlers_outside_aws_use_their_configured_endpoints(aws, adapter, tmp_path: Path):
    if adapter == "gcp":
        emulator: Any = GceEmulator()
        emulator.start()
        emulator.add_snapshot("models", "llama", binding(DIGEST))
        update = {"gcp_project": "infer", "gcp_compute_endpoint": emulator.endpoint}
        location, source = "us-central1-a", "projects/models/global/snapshots/llama"
    else:
        emulator = KubernetesEmulator()
        emulator.start()
        emulator.add_volume_snapshot("models", "llama", {DIGEST_ANNOTATION: DIGEST})
        update = {"kubernetes_endpoint": emulator.endpoint}
        location, source = "prod/models", "llama"
    container = Container(aws.settings.model_copy(update=update))
    reset_container(container)
    try:
        event = event_for(adapter, container, location, source)
        result = handler(f"adapter_{adapter}")(event, CONTEXT)
        assert result["batchItemFailures"] == []
        [eff] = container.cache.effective("demo", DIGEST, adapter, location)
        # A new claim is Pending until the provisioner binds it (a re-check is queued); the
        # emulated disk is READY at once.
        assert eff.document()["state"] == ("present" if adapter == "gcp" else "prefetching")
    finally:
        emulator.stop()
        reset_container(aws.container)
