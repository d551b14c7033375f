"""AWS rules over EC2's own JSON shapes (DescribeSnapshots / DescribeVolumes /
DescribeFastSnapshotRestores items). Pure: `infercrane.adapters.ec2` fetches, these decide.

The digest binding lives in the snapshot's `Description`, which is fixed at creation; tags are
editable, so a tag is only a hint and never makes a snapshot acceptable on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import Assessment, Verdict, check_binding

PREFETCH_KEY_TAG = "infercrane:prefetch-key"
MODEL_TAG = "infercrane:model"
REQUEST_TAG = "infercrane:request-id"
FSR_READY = "enabled"
# The states EC2 bills for (per hour, per snapshot and AZ): everything short of disabled.
FSR_BILLED = ("enabling", "optimizing", "enabled")
FsrStep = Literal["enable", "wait", "create", "disable", "keep"]


def fast_snapshot_restore_step(fsr_state: str | None,
                               volume: dict[str, Any] | None) -> FsrStep:
    """What to do about Fast Snapshot Restore on (snapshot, AZ) when it is configured.

    Only a volume created while FSR is `enabled` is initialized at creation, so before the
    volume exists FSR is enabled and awaited (`optimizing` is not yet `enabled`). FSR bills per
    hour for the snapshot and AZ whether or not a volume is ever made from it, so once the
    volume has left `creating` (ready, or failed) FSR has done its work and is disabled.
    `fsr_state` None: DescribeFastSnapshotRestores has no entry, i.e. disabled."""
    state = fsr_state or "disabled"
    if volume is None:
        if state == FSR_READY:
            return "create"
        return "wait" if state in FSR_BILLED else "enable"
    if volume.get("State") != "creating" and state in FSR_BILLED:
        return "disable"
    return "keep"


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags") or []}


def _same_kms_key(actual: str | None, expected: str) -> bool:
    # DescribeSnapshots returns the key ARN; settings may hold the ARN or the bare key id.
    if not actual:
        return False
    return actual == expected or actual.endswith(f":key/{expected}")


@dataclass(frozen=True)
class AwsRules:
    expected_kms_key_id: str | None = None
    expected_owner_id: str | None = None
    provider: str = "aws"

    def check_source(self, snapshot: dict[str, Any] | None, target: Target) -> Verdict:
        if snapshot is None:
            return Verdict.fail("verification_failed: snapshot not found")
        state = snapshot.get("State")
        if state in ("pending", "recovering"):
            return Verdict.wait("source snapshot not completed", snapshot_state=str(state))
        if state != "completed":
            return Verdict.fail("verification_failed: snapshot not completed",
                                snapshot_state=str(state))
        if snapshot.get("Encrypted") is not True:
            return Verdict.fail("verification_failed: snapshot not encrypted")
        if self.expected_kms_key_id and not _same_kms_key(snapshot.get("KmsKeyId"),
                                                          self.expected_kms_key_id):
            return Verdict.fail("verification_failed: snapshot KMS key is not the expected key")
        if self.expected_owner_id and snapshot.get("OwnerId") != self.expected_owner_id:
            return Verdict.fail("verification_failed: snapshot owner is not the expected account")
        # StorageTier is absent on older API answers and emulators: absent means standard.
        tier = snapshot.get("StorageTier", "standard")
        if tier != "standard":
            return Verdict.fail("verification_failed: snapshot is not in the standard tier "
                                "(restore an archived snapshot first)")
        reason = check_binding(snapshot.get("Description"), target.model, "snapshot description")
        if reason:
            return Verdict.fail(reason)
        evidence = {"snapshot_id": str(snapshot.get("SnapshotId", "")), "snapshot_state": "completed",
                    "encrypted": "true", "storage_tier": "standard", "binding": "description"}
        hint = tags(snapshot).get(MODEL_TAG)
        if hint is not None:
            evidence["tag_hint"] = "agrees" if hint == target.model else "disagrees (ignored)"
        return Verdict("ok", None, evidence)

    def resource_id(self, volume: dict[str, Any]) -> str:
        return str(volume["VolumeId"])

    def owned(self, volume: dict[str, Any], target: Target) -> bool:
        return tags(volume).get(PREFETCH_KEY_TAG) == target.key

    def assess(self, volume: dict[str, Any], target: Target,
               facts: dict[str, str]) -> Assessment:
        evidence = {"volume_id": str(volume.get("VolumeId", "")),
                    "volume_state": str(volume.get("State", "")),
                    "availability_zone": str(volume.get("AvailabilityZone", ""))}
        if volume.get("AvailabilityZone") != target.location:
            return Assessment("failed", "verification_failed: volume in wrong availability zone",
                              evidence)
        if volume.get("SnapshotId") != target.source:
            return Assessment("failed", "verification_failed: volume not created from the "
                              "source snapshot", evidence)
        if volume.get("Encrypted") is not True:
            return Assessment("failed", "verification_failed: volume not encrypted", evidence)
        state = volume.get("State")
        if state == "creating":
            return Assessment("prefetching", "volume creating", evidence)
        if state not in ("available", "in-use"):
            return Assessment("missing", "volume not usable", evidence)
        # Evidence only: FSR was awaited before the volume was created (fast_snapshot_restore_step);
        # EC2's own FastRestored says whether this volume got its benefit (no credit, no benefit).
        if "fast_snapshot_restore" in facts:
            evidence["fast_snapshot_restore"] = facts["fast_snapshot_restore"]
        if "FastRestored" in volume:
            evidence["fast_restored"] = str(bool(volume["FastRestored"])).lower()
        return Assessment("present", None, evidence)

    def plan(self, volume: dict[str, Any], target: Target) -> dict[str, Any]:
        vid = self.resource_id(volume)
        device = f"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_{vid.replace('-', '')}"
        # EBS AttachVolume has no read-only flag: read-only is enforced where it is mounted.
        return {
            "provider": "aws", "read_only": True, "volume_id": vid,
            "availability_zone": target.location,
            "attach": {"VolumeId": vid, "note": "EBS attachments are read-write; mount read-only"},
            "mount": {"options": ["ro", "noload"],
                      "command": f"mount -o ro,noload {device} /models/{target.digest_hex[:12]}"},
            "kubernetes": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": vid,
                                   "readOnly": True, "fsType": "ext4"}},
        }
