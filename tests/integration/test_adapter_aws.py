"""AWS adapter with real boto3 against moto's EC2 (snapshots, volumes, tags) and botocore's
Stubber for Fast Snapshot Restore (moto lacks it), driven through the real prefetch and cache
services on the template's tables."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from infercrane.adapters.ec2 import Ec2Adapter
from infercrane.bootstrap.providers import adapter_runner
from infercrane.domain.prefetch import adapter_message
from infercrane.domain.providers.aws import PREFETCH_KEY_TAG, AwsRules
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import binding

DIGEST = "sha256:" + "ab" * 32
AZ = "us-east-1a"


@pytest.fixture
def ec2(aws: Any) -> Any:
    return aws.client("ec2")


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def runner(aws: Any, ec2: Any) -> Any:
    # The production wiring, with each test's own (unique) tenant keeping prefetch keys apart.
    return adapter_runner(
        aws.container, Ec2Adapter(ec2), AwsRules(), aws.settings.adapter_aws_queue_url)


def make_snapshot(ec2: Any, *, encrypted: bool = True, digest: str = DIGEST) -> str:
    vol = ec2.create_volume(AvailabilityZone=AZ, Size=1, Encrypted=encrypted)["VolumeId"]
    return ec2.create_snapshot(VolumeId=vol, Description=f"weights {binding(digest)}")["SnapshotId"]


def prefetch(aws: Any, snap: str, tenant: str, action: str = "prefetch") -> Any:
    req, _ = aws.container.prefetch.request(tenant, DIGEST, "aws", AZ, snap)
    return req, json.dumps(adapter_message(req, action))


def tagged_volumes(ec2: Any, key: str) -> list[dict[str, Any]]:
    vols = ec2.describe_volumes(Filters=[{"Name": f"tag:{PREFETCH_KEY_TAG}",
                                          "Values": [key]}])["Volumes"]
    return [v for v in vols if v["State"] not in ("deleting", "deleted")]


def test_verified_snapshot_is_prefetched_into_a_volume_and_reads_present(aws, ec2, runner,
                                                                          tenant):
    snap = make_snapshot(ec2)
    req, body = prefetch(aws, snap, tenant)
    out = runner.handle(body)
    assert out.state == "present"
    vol = ec2.describe_volumes(VolumeIds=[out.resource_id])["Volumes"][0]
    assert vol["SnapshotId"] == snap
    assert vol["AvailabilityZone"] == AZ
    assert aws.container.prefetch.get(tenant, req.id).status == "completed"
    [eff] = aws.container.cache.effective(tenant, DIGEST, "aws", AZ)
    assert eff.document()["state"] == "present"
    assert out.plan["mount"]["options"][0] == "ro"


def test_redelivery_creates_no_duplicate_volume(aws, ec2, runner, tenant):
    snap = make_snapshot(ec2)
    req, body = prefetch(aws, snap, tenant)
    first = runner.handle(body)
    # The same message again, as if the first delivery's acknowledgement was lost mid-flight:
    # rewind the stored status (the store directly; the service only moves forward).
    aws.container.prefetch._store.update_status(
        req.ref, ("completed",), "in_progress", datetime.now(UTC), reason=None, sweep_due=None,
        dispatched=False)
    second = runner.handle(body)
    assert second.state == "present"
    assert second.resource_id == first.resource_id
    assert len(tagged_volumes(ec2, Target.of(tenant, req.id, DIGEST, "aws", AZ, snap).key)) == 1


def test_unencrypted_snapshot_fails_with_its_reason_and_never_reads_present(aws, ec2, runner,
                                                                            tenant):
    snap = make_snapshot(ec2, encrypted=False)
    req, body = prefetch(aws, snap, tenant)
    out = runner.handle(body)
    assert out.reason == "verification_failed: snapshot not encrypted"
    stored = aws.container.prefetch.get(tenant, req.id)
    assert stored.status == "failed"
    assert "snapshot_not_encrypted" in stored.failure_reason
    [eff] = aws.container.cache.effective(tenant, DIGEST, "aws", AZ)
    assert eff.document()["state"] == "missing"
    assert tagged_volumes(ec2, Target.of(tenant, req.id, DIGEST, "aws", AZ, snap).key) == []


def test_mismatched_digest_in_the_description_fails_with_its_reason(aws, ec2, runner, tenant):
    snap = make_snapshot(ec2, digest="sha256:" + "cd" * 32)
    _, body = prefetch(aws, snap, tenant)
    out = runner.handle(body)
    assert out.reason == "verification_failed: digest mismatch in snapshot description"


def test_release_deletes_only_the_volume_this_prefetch_created(aws, ec2, runner, tenant):
    snap = make_snapshot(ec2)
    bystander = ec2.create_volume(AvailabilityZone=AZ, SnapshotId=snap)["VolumeId"]
    req, body = prefetch(aws, snap, tenant)
    made = runner.handle(body).resource_id
    released = runner.handle(json.dumps(adapter_message(
        aws.container.prefetch.get(tenant, req.id), "release")))
    assert released.deleted == [made]
    left = {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]}
    assert made not in left
    assert bystander in left


def test_missing_snapshot_is_a_verification_failure(aws, runner, tenant):
    _, body = prefetch(aws, "snap-0000000000000000a", tenant)
    assert runner.handle(body).reason == \
        "verification_failed: snapshot not found"


# -- Fast Snapshot Restore (botocore Stubber: moto does not implement it) -----------------------
@pytest.fixture
def stubbed_ec2():
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub


TARGET = Target.of("demo", "pf_1", DIGEST, "aws", AZ, "snap-0123456789abcdef0")
VOLUME = {"VolumeId": "vol-1", "State": "available", "AvailabilityZone": AZ,
          "SnapshotId": TARGET.source, "Encrypted": True,
          "Tags": [{"Key": PREFETCH_KEY_TAG, "Value": TARGET.key}]}
FSR_FILTERS = [{"Name": "snapshot-id", "Values": [TARGET.source]},
               {"Name": "availability-zone", "Values": [AZ]}]


def fsr_state(stub: Stubber, *states: str) -> None:
    stub.add_response("describe_fast_snapshot_restores", {"FastSnapshotRestores": [
        {"SnapshotId": TARGET.source, "AvailabilityZone": AZ, "State": s} for s in states]},
        {"Filters": FSR_FILTERS})


def fsr_change(stub: Stubber, op: str, state: str) -> None:
    stub.add_response(op, {"Successful": [{"SnapshotId": TARGET.source, "AvailabilityZone": AZ,
                                           "State": state}], "Unsuccessful": []},
                      {"AvailabilityZones": [AZ], "SourceSnapshotIds": [TARGET.source]})


def test_fast_snapshot_restore_is_enabled_before_any_volume_is_created(stubbed_ec2):
    # Only a volume created while FSR is `enabled` is initialized at creation: no CreateVolume
    # (the Stubber refuses any call not queued) until then.
    client, stub = stubbed_ec2
    fsr_state(stub)
    fsr_change(stub, "enable_fast_snapshot_restores", "enabling")
    assert Ec2Adapter(client, fast_snapshot_restore=True).create(TARGET, {}) is None
    stub.assert_no_pending_responses()


@pytest.mark.parametrize("state", ["enabling", "optimizing"])
def test_fast_snapshot_restore_on_its_way_is_awaited_not_re_enabled(stubbed_ec2, state):
    client, stub = stubbed_ec2
    fsr_state(stub, state)
    assert Ec2Adapter(client, fast_snapshot_restore=True).create(TARGET, {}) is None
    stub.assert_no_pending_responses()


def test_the_volume_is_created_once_fast_snapshot_restore_is_enabled(stubbed_ec2):
    client, stub = stubbed_ec2
    fsr_state(stub, "enabled")
    stub.add_response("create_volume", {**VOLUME, "State": "creating"},
                      {"AvailabilityZone": AZ, "SnapshotId": TARGET.source, "VolumeType": "gp3",
                       "Encrypted": True, "ClientToken": TARGET.client_token,
                       "TagSpecifications": ANY})
    made = Ec2Adapter(client, fast_snapshot_restore=True).create(TARGET, {})
    assert made is not None and made["VolumeId"] == "vol-1"
    stub.assert_no_pending_responses()


@pytest.mark.parametrize("volume_state", ["available", "in-use", "error"])
def test_fast_snapshot_restore_is_disabled_once_the_volume_left_creating(stubbed_ec2,
                                                                          volume_state):
    client, stub = stubbed_ec2
    fsr_state(stub, "enabled")
    fsr_change(stub, "disable_fast_snapshot_restores", "disabling")
    facts = Ec2Adapter(client, fast_snapshot_restore=True).facts(
        TARGET, {**VOLUME, "State": volume_state})
    assert facts == {"fast_snapshot_restore": "disabling"}
    stub.assert_no_pending_responses()


def test_fast_snapshot_restore_stays_on_while_the_volume_is_creating(stubbed_ec2):
    client, stub = stubbed_ec2
    fsr_state(stub, "enabled")
    facts = Ec2Adapter(client, fast_snapshot_restore=True).facts(
        TARGET, {**VOLUME, "State": "creating"})
    assert facts == {"fast_snapshot_restore": "enabled"}
    stub.assert_no_pending_responses()  # no DisableFastSnapshotRestores call was made


def test_fast_snapshot_restore_refusal_surfaces_the_provider_code(stubbed_ec2):
    from infercrane.domain.providers.model import ProviderCallFailed

    client, stub = stubbed_ec2
    fsr_state(stub)
    stub.add_client_error("enable_fast_snapshot_restores", service_error_code="UnauthorizedOperation",
                          service_message="You are not authorized", http_status_code=403)
    with pytest.raises(ProviderCallFailed) as err:
        Ec2Adapter(client, fast_snapshot_restore=True).create(TARGET, {})
    assert err.value.provider_code == "UnauthorizedOperation"


def test_a_disable_that_ec2_reports_unsuccessful_raises_its_code(stubbed_ec2):
    from infercrane.domain.providers.model import ProviderCallFailed

    client, stub = stubbed_ec2
    fsr_state(stub, "enabled")
    stub.add_response("disable_fast_snapshot_restores", {"Successful": [], "Unsuccessful": [
        {"SnapshotId": TARGET.source, "FastSnapshotRestoreStateErrors": [
            {"AvailabilityZone": AZ, "Error": {"Code": "InternalError", "Message": "try again"}}]}]},
        {"AvailabilityZones": [AZ], "SourceSnapshotIds": [TARGET.source]})
    with pytest.raises(ProviderCallFailed) as err:
        Ec2Adapter(client, fast_snapshot_restore=True).facts(TARGET, VOLUME)
    assert err.value.provider_code == "InternalError"


def test_a_prefetch_with_fast_snapshot_restore_enables_creates_then_disables(aws, tenant,
                                                                              stubbed_ec2):
    """Three deliveries of one message through the production runner and services: FSR
    enabled (no volume), the volume created once FSR is enabled, FSR disabled once the volume
    is available, and only then `present`."""
    client, stub = stubbed_ec2
    runner = adapter_runner(aws.container, Ec2Adapter(client, fast_snapshot_restore=True),
                            AwsRules(), aws.settings.adapter_aws_queue_url)
    req, _ = aws.container.prefetch.request(tenant, DIGEST, "aws", AZ, TARGET.source)
    body = json.dumps(adapter_message(req, "prefetch"))
    target = Target.of(tenant, req.id, DIGEST, "aws", AZ, TARGET.source)
    snapshot = {"SnapshotId": TARGET.source, "State": "completed", "Encrypted": True,
                "Description": f"weights {binding(DIGEST)}", "VolumeSize": 1}
    by_tag = {"Filters": [{"Name": f"tag:{PREFETCH_KEY_TAG}", "Values": [target.key]},
                          {"Name": "availability-zone", "Values": [AZ]}]}
    volume = {**VOLUME, "Tags": [{"Key": PREFETCH_KEY_TAG, "Value": target.key}]}

    def source_and_lookup(found: list[dict[str, Any]]) -> None:
        stub.add_response("describe_snapshots", {"Snapshots": [snapshot]},
                          {"SnapshotIds": [TARGET.source]})
        stub.add_response("describe_volumes", {"Volumes": found}, by_tag)

    source_and_lookup([])
    fsr_state(stub)
    fsr_change(stub, "enable_fast_snapshot_restores", "enabling")
    first = runner.handle(body)
    assert (first.state, first.resource_id) == ("prefetching", None)

    source_and_lookup([])
    fsr_state(stub, "enabled")
    stub.add_response("create_volume", {**volume, "State": "creating"}, None)
    fsr_state(stub, "enabled")
    second = runner.handle(body)
    assert (second.state, second.reason) == ("prefetching", "volume creating")

    source_and_lookup([volume])
    fsr_state(stub, "enabled")
    fsr_change(stub, "disable_fast_snapshot_restores", "disabling")
    third = runner.handle(body)
    stub.assert_no_pending_responses()
    assert (third.state, third.resource_id) == ("present", "vol-1")
    assert aws.container.prefetch.get(tenant, req.id).status == "completed"
    [eff] = aws.container.cache.effective(tenant, DIGEST, "aws", AZ)
    assert eff.document()["state"] == "present"


class BlindFind(Ec2Adapter):
    """A delivery whose tag lookup ran before the other delivery's CreateVolume landed."""

    def find(self, target: Target) -> dict[str, Any] | None:
        return None


def test_two_racing_deliveries_leave_one_volume(aws, ec2, runner, tenant):
    # moto ignores ClientToken (real EC2 would dedupe), so the race really makes two volumes:
    # the conditional record decides, and the loser deletes its own.
    snap = make_snapshot(ec2)
    req, body = prefetch(aws, snap, tenant)
    first = runner.handle(body)
    # The second delivery started while the request was still in progress.
    aws.container.prefetch._store.update_status(
        req.ref, ("completed",), "in_progress", datetime.now(UTC), reason=None, sweep_due=None,
        dispatched=False)
    racer = adapter_runner(
        aws.container, BlindFind(ec2), AwsRules(), aws.settings.adapter_aws_queue_url)
    second = racer.handle(body)
    assert second.resource_id == first.resource_id
    assert len(second.deleted) == 1
    assert second.deleted[0] != first.resource_id
    key = Target.of(tenant, req.id, DIGEST, "aws", AZ, snap).key
    assert [v["VolumeId"] for v in tagged_volumes(ec2, key)] == [first.resource_id]
