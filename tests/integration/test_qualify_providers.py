"""The provider qualification's AWS scenario against moto's EC2 (the real run needs credentials):
it lists leftovers first, verifies the snapshot, measures prefetch-to-available, and deletes only
what it created. Without a configured target it skips in one line."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from infercrane.qualify import providers

MODEL = "sha256:" + "ab" * 32


@pytest.fixture
def ec2():
    with mock_aws():
        client = boto3.client("ec2", region_name="us-east-1")
        yield client


def snapshot(ec2, description: str, encrypted: bool = True) -> str:
    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1, Encrypted=encrypted)["VolumeId"]
    return ec2.create_snapshot(VolumeId=vol, Description=description)["SnapshotId"]


def test_provider_run_without_a_target_skips_in_one_line(capsys):
    assert providers.main(None, env={}) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [providers.NEEDS]


def test_provider_run_is_configured_only_by_a_complete_target():
    env = {"INFERCRANE_QUALIFY_MODEL": MODEL, "INFERCRANE_QUALIFY_AWS_SNAPSHOT": "snap-1"}
    assert providers.configured(env) == {}
    env["INFERCRANE_QUALIFY_AWS_AZ"] = "us-east-1a"
    assert providers.configured(env)["aws"].region == "us-east-1"


def test_aws_scenario_measures_prefetches_and_deletes_only_what_it_created(ec2, capsys):
    snap = snapshot(ec2, f"model infercrane-model={MODEL}")
    foreign = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1, TagSpecifications=[{
        "ResourceType": "volume", "Tags": [{"Key": providers.QUALIFICATION_TAG, "Value": "old"}]}])
    target = providers.AwsTarget(MODEL, snap, "us-east-1a", repeats=3)
    result = providers.run_aws(target, ec2, dry_run=False, wait_s=5, poll_s=0.01)
    assert result.ok, result.failures()
    assert result.facts["prefetch_to_available_s"]["n"] == 3
    assert foreign["VolumeId"] in capsys.readouterr().err  # listed in the dry-run line
    assert providers.leftovers(ec2) == [foreign["VolumeId"]]  # an earlier run's: not ours to delete


def test_aws_dry_run_creates_nothing(ec2):
    snap = snapshot(ec2, f"infercrane-model={MODEL}")
    before = len(ec2.describe_volumes()["Volumes"])
    result = providers.run_aws(providers.AwsTarget(MODEL, snap, "us-east-1a", 2), ec2, dry_run=True)
    assert result.ok
    assert len(ec2.describe_volumes()["Volumes"]) == before


def test_aws_scenario_fails_on_a_snapshot_bound_to_another_model(ec2):
    snap = snapshot(ec2, "infercrane-model=sha256:" + "cd" * 32)
    result = providers.run_aws(providers.AwsTarget(MODEL, snap, "us-east-1a", 1), ec2,
                               dry_run=False, wait_s=5, poll_s=0.01)
    assert [c.name for c in result.failures()] == [
        "snapshot binds the model digest in its description"]
