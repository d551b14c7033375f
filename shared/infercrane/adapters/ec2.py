"""EC2 adapter (boto3): EBS snapshots, volumes prefetched from them, Fast Snapshot Restore.

Returns EC2's own JSON shapes; `infercrane.domain.providers.aws.AwsRules` decides what they mean,
and `fast_snapshot_restore_step` when Fast Snapshot Restore is enabled and disabled.
Idempotency does not rest on `ClientToken` alone (moto ignores it, and a token is only honoured
for a while): the volume is tagged with the prefetch key at creation and looked up by that tag
first, and the runner records its id with a conditional write.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.domain.providers.aws import (
    MODEL_TAG,
    PREFETCH_KEY_TAG,
    REQUEST_TAG,
    fast_snapshot_restore_step,
)
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import ProviderCallFailed
from infercrane.errors import DependencyUnavailable

GONE = ("deleting", "deleted", "error")
_NOT_FOUND = ("InvalidSnapshot.NotFound", "InvalidVolume.NotFound")


class Ec2Adapter:
    provider = "aws"

    def __init__(self, client: Any, *, fast_snapshot_restore: bool = False,
                 volume_type: str = "gp3", kms_key_id: str | None = None):
        self._ec2 = client
        self._fsr = fast_snapshot_restore
        self._volume_type = volume_type
        self._kms_key_id = kms_key_id

    def describe_source(self, target: Target) -> dict[str, Any] | None:
        got = self._call("describe_snapshots", SnapshotIds=[target.source])
        snaps = got.get("Snapshots") if got else None
        return snaps[0] if snaps else None

    def find(self, target: Target) -> dict[str, Any] | None:
        got = self._call("describe_volumes", Filters=[
            {"Name": f"tag:{PREFETCH_KEY_TAG}", "Values": [target.key]},
            {"Name": "availability-zone", "Values": [target.location]},
        ]) or {}
        live = [v for v in got.get("Volumes", []) if v.get("State") not in GONE]
        # Oldest first, then id: every delivery picks the same one if duplicates ever exist.
        live.sort(key=lambda v: (str(v.get("CreateTime", "")), v["VolumeId"]))
        return live[0] if live else None

    def create(self, target: Target, source: dict[str, Any]) -> dict[str, Any] | None:
        """The volume; None while Fast Snapshot Restore (when configured) is not yet enabled
        for the snapshot in the AZ: it is enabled here, after the snapshot was verified."""
        if self._fsr:
            step = fast_snapshot_restore_step(self._fsr_state(target), None)
            if step == "enable":
                self._fsr_change("enable_fast_snapshot_restores", target)
            if step != "create":
                return None
        kwargs: dict[str, Any] = {
            "AvailabilityZone": target.location, "SnapshotId": target.source,
            "VolumeType": self._volume_type, "Encrypted": True,
            "ClientToken": target.client_token,
            "TagSpecifications": [{"ResourceType": "volume", "Tags": [
                {"Key": PREFETCH_KEY_TAG, "Value": target.key},
                {"Key": MODEL_TAG, "Value": target.model},
                {"Key": REQUEST_TAG, "Value": target.request_id},
                {"Key": "Name", "Value": target.name},
            ]}],
        }
        if self._kms_key_id:
            kwargs["KmsKeyId"] = self._kms_key_id
        volume = self._call("create_volume", **kwargs)
        volume.pop("ResponseMetadata", None)
        return dict(volume)

    def describe(self, target: Target, resource_id: str) -> dict[str, Any] | None:
        got = self._call("describe_volumes", VolumeIds=[resource_id])
        vols = got.get("Volumes") if got else None
        return vols[0] if vols else None

    def delete(self, target: Target, resource_id: str) -> None:
        self._call("delete_volume", VolumeId=resource_id)

    def facts(self, target: Target, resource: dict[str, Any]) -> dict[str, str]:
        """FSR's state for the volume's evidence, after disabling it once the volume left
        `creating`. A failed disable raises: the runner retries a transient one."""
        if not self._fsr:
            return {}
        state = self._fsr_state(target)
        if fast_snapshot_restore_step(state, resource) == "disable":
            state = self._fsr_change("disable_fast_snapshot_restores", target)
        return {"fast_snapshot_restore": state or "disabled"}

    def _fsr_state(self, target: Target) -> str | None:
        filters = [{"Name": "snapshot-id", "Values": [target.source]},
                   {"Name": "availability-zone", "Values": [target.location]}]
        got = self._call("describe_fast_snapshot_restores", Filters=filters) or {}
        states = [r.get("State") for r in got.get("FastSnapshotRestores", [])]
        return str(states[0]) if states and states[0] else None

    def _fsr_change(self, op: str, target: Target) -> str:
        """Enable or disable FSR for the snapshot in the AZ; the state EC2 answers with. EC2
        reports a refusal in the answer's `Unsuccessful` list, not as an error."""
        got = self._call(op, AvailabilityZones=[target.location],
                         SourceSnapshotIds=[target.source]) or {}
        ok = got.get("Successful") or []
        if not ok:
            err = ((got.get("Unsuccessful") or [{}])[0].get("FastSnapshotRestoreStateErrors")
                   or [{}])[0].get("Error") or {}
            raise ProviderCallFailed("aws", err.get("Code"), err.get("Message"))
        return str(ok[0].get("State") or ("enabling" if op.startswith("enable") else "disabling"))

    def _call(self, op: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._ec2, op)(**kwargs)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            if err.get("Code") in _NOT_FOUND:
                return None
            raise ProviderCallFailed("aws", err.get("Code"), err.get("Message"),
                                     status=exc.response.get("ResponseMetadata", {})
                                     .get("HTTPStatusCode")) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable("EC2 is unavailable.", field="provider") from exc
