"""GCP adapter: google-cloud-compute (REST transport) against the local GCE emulator, driven
through the real prefetch and cache services on the template's tables."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from infercrane.adapters.gce import GceAdapter, disks_clients
from infercrane.bootstrap.providers import adapter_runner
from infercrane.domain.prefetch import adapter_message
from infercrane.domain.providers.gcp import GcpRules
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import binding
from tests.emulators.gce import GceEmulator

DIGEST = "sha256:" + "ab" * 32
ZONE = "us-central1-a"
SOURCE = "projects/models/global/snapshots/llama"


@pytest.fixture(scope="module")
def gce() -> Iterator[GceEmulator]:
    emulator = GceEmulator()
    emulator.start()
    emulator.add_snapshot("models", "llama", f"llama weights {binding(DIGEST)}")
    emulator.add_snapshot("models", "other", binding("sha256:" + "cd" * 32))
    emulator.add_image("models", "llama-img", binding(DIGEST))
    yield emulator
    emulator.stop()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def runner(aws: Any, gce: GceEmulator) -> Any:
    adapter = GceAdapter(*disks_clients(gce.endpoint), project="infer")
    return adapter_runner(
        aws.container, adapter, GcpRules(), aws.settings.adapter_gcp_queue_url)


def body(aws: Any, tenant: str, source: str = SOURCE, action: str = "prefetch") -> tuple[Any, str]:
    req, _ = aws.container.prefetch.request(tenant, DIGEST, "gcp", ZONE, source)
    return req, json.dumps(adapter_message(req, action))


def test_disk_is_inserted_from_the_snapshot_and_reads_present_with_a_read_only_attach(
        aws, gce, runner, tenant):
    req, msg = body(aws, tenant)
    out = runner.handle(msg)
    assert out.state == "present"
    assert out.plan["attachedDisks"][0]["mode"] == "READ_ONLY"
    disk = gce.disks[("infer", ZONE, out.resource_id)]
    assert disk["sourceSnapshot"].endswith(SOURCE)
    assert binding(DIGEST) in disk["description"]
    [eff] = aws.container.cache.effective(tenant, DIGEST, "gcp", ZONE)
    assert eff.document()["state"] == "present"
    assert aws.container.prefetch.get(tenant, req.id).status == "completed"


def test_an_image_source_works_too(aws, gce, runner, tenant):
    _, msg = body(aws, tenant, "projects/models/global/images/llama-img")
    out = runner.handle(msg)
    assert out.state == "present"
    assert gce.disks[("infer", ZONE, out.resource_id)]["sourceImage"].endswith("llama-img")


def test_redelivery_inserts_one_disk(aws, gce, runner, tenant):
    _req, msg = body(aws, tenant)
    before = gce.inserts
    gce.ready_after_s = 30.0  # stays RESTORING: the request is still in progress
    try:
        first = runner.handle(msg)
        second = runner.handle(msg)
    finally:
        gce.ready_after_s = 0.0
    assert first.state == second.state == "prefetching"
    assert gce.inserts - before == 1
    assert first.recheck_in_s is not None
    [eff] = aws.container.cache.effective(tenant, DIGEST, "gcp", ZONE)
    assert eff.document()["state"] == "prefetching"
    sqs = aws.client("sqs")
    got = sqs.receive_message(QueueUrl=aws.settings.adapter_gcp_queue_url,
                              MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
    assert got == []  # the re-checks are delayed, not immediately visible


def test_a_disk_that_finishes_restoring_is_present_on_the_recheck(aws, gce, runner, tenant):
    _req, msg = body(aws, tenant)
    gce.ready_after_s = 0.3
    try:
        assert runner.handle(msg).state == "prefetching"
        time.sleep(0.4)
        recheck = json.loads(msg) | {"attempt": 2}
        assert runner.handle(json.dumps(recheck)).state == "present"
    finally:
        gce.ready_after_s = 0.0


def test_a_snapshot_bound_to_another_digest_fails_with_its_reason(aws, gce, runner, tenant):
    _, msg = body(aws, tenant, "projects/models/global/snapshots/other")
    out = runner.handle(msg)
    assert out.reason == "verification_failed: digest mismatch in snapshot description"


def test_a_wrong_zone_disk_is_a_verification_failure_not_present(aws, gce, runner, tenant):
    req, msg = body(aws, tenant)
    t = Target.of(tenant, req.id, DIGEST, "gcp", ZONE, SOURCE)
    # A disk under the deterministic name whose zone is not the target's (e.g. a hand-made one).
    doc = gce.add_disk("infer", ZONE, {"name": t.name, "description": binding(DIGEST),
                                      "labels": {"infercrane-prefetch-key": t.key}})
    doc["zone"] = doc["zone"].replace(ZONE, "us-central1-b")
    out = runner.handle(msg)
    assert out.reason == "verification_failed: disk in wrong zone"
    [eff] = aws.container.cache.effective(tenant, DIGEST, "gcp", ZONE)
    assert eff.document()["state"] == "missing"


def test_release_deletes_only_the_disk_it_created(aws, gce, runner, tenant):
    req, msg = body(aws, tenant)
    made = runner.handle(msg).resource_id
    other = gce.add_disk("infer", ZONE, {"name": "hand-made", "description": binding(DIGEST)})
    out = runner.handle(json.dumps(adapter_message(aws.container.prefetch.get(tenant, req.id),
                                                   "release")))
    assert out.deleted == [made]
    assert ("infer", ZONE, made) not in gce.disks
    assert ("infer", ZONE, other["name"]) in gce.disks


def test_release_leaves_an_untagged_disk_under_the_name_alone(aws, gce, runner, tenant):
    req, _ = body(aws, tenant)
    t = Target.of(tenant, req.id, DIGEST, "gcp", ZONE, SOURCE)
    gce.add_disk("infer", ZONE, {"name": t.name, "description": binding(DIGEST)})
    out = runner.handle(json.dumps(adapter_message(req, "release")))
    assert out.state == "skipped"
    assert ("infer", ZONE, t.name) in gce.disks


def test_a_quota_error_on_insert_fails_the_request_with_the_classified_reason(
        aws, gce, runner, tenant):
    req, msg = body(aws, tenant)
    gce.fail_next("POST", r"/disks$", 403, "QUOTA_EXCEEDED")
    out = runner.handle(msg)
    assert out.reason == "quota: QUOTA_EXCEEDED"
    stored = aws.container.prefetch.get(tenant, req.id)
    assert stored.status == "failed"
    [eff] = aws.container.cache.effective(tenant, DIGEST, "gcp", ZONE)
    assert eff.document()["state"] == "unknown"


def test_a_server_error_is_absorbed_by_a_retry_never_a_failed_request(aws, gce, runner, tenant):
    req, msg = body(aws, tenant)
    gce.fail_next("GET", r"/global/snapshots/", 503, "backendError")
    out = runner.handle(msg)
    assert out.state == "present"
    assert gce.faults == []  # the 503 was served, and retried past
    assert aws.container.prefetch.get(tenant, req.id).status == "completed"


@pytest.mark.parametrize(("status", "transient"), [(503, True), (500, True), (429, True),
                                                   (403, False), (400, False)])
def test_gce_errors_by_status_become_retry_or_classified_failure(status, transient):
    from google.api_core import exceptions as gexc

    from infercrane.adapters.gce import _provider_error
    from infercrane.domain.providers.model import ProviderCallFailed
    from infercrane.errors import DependencyUnavailable

    exc = gexc.from_http_status(status, "injected", errors=[{"reason": "someReason"}])
    err = _provider_error(exc)
    assert isinstance(err, DependencyUnavailable) is transient
    if not transient:
        assert isinstance(err, ProviderCallFailed)
        assert err.provider_code == "someReason"
