"""GCP rules over Compute Engine's JSON (disks.get, snapshots.get, images.get). Pure.

The full digest lives in `description` (a 64-hex sha256 does not fit a label value, and labels
are editable hints). A zonal disk serves only its zone, so the zone must equal the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import Assessment, Verdict, check_binding

PREFETCH_KEY_LABEL = "infercrane-prefetch-key"
SOURCE_READY = "READY"
SOURCE_PENDING = ("CREATING", "UPLOADING", "PENDING")
DISK_PREFETCHING = ("CREATING", "RESTORING")


def zone_of(url_or_name: str | None) -> str:
    return (url_or_name or "").rstrip("/").rsplit("/", 1)[-1]


def source_kind(source: str) -> str:
    return "image" if "/images/" in source else "snapshot"


@dataclass(frozen=True)
class GcpRules:
    provider: str = "gcp"

    def check_source(self, source: dict[str, Any] | None, target: Target) -> Verdict:
        kind = source_kind(target.source)
        if source is None:
            return Verdict.fail(f"verification_failed: source {kind} not found")
        status = source.get("status")
        if status in SOURCE_PENDING:
            return Verdict.wait(f"source {kind} not ready", source_status=str(status))
        if status != SOURCE_READY:
            return Verdict.fail(f"verification_failed: source {kind} not ready",
                                source_status=str(status))
        reason = check_binding(source.get("description"), target.model, f"{kind} description")
        if reason:
            return Verdict.fail(reason)
        return Verdict.ok(source=target.source, source_status=SOURCE_READY,
                          binding="description")

    def resource_id(self, disk: dict[str, Any]) -> str:
        return str(disk["name"])

    def owned(self, disk: dict[str, Any], target: Target) -> bool:
        return (disk.get("name") == target.name
                and (disk.get("labels") or {}).get(PREFETCH_KEY_LABEL) == target.key)

    def assess(self, disk: dict[str, Any], target: Target, facts: dict[str, str]) -> Assessment:
        status = str(disk.get("status", ""))
        evidence = {"disk": str(disk.get("name", "")), "disk_status": status,
                    "zone": zone_of(disk.get("zone"))}
        if zone_of(disk.get("zone")) != target.location:
            return Assessment("failed", "verification_failed: disk in wrong zone", evidence)
        reason = check_binding(disk.get("description"), target.model, "disk description")
        if reason:
            return Assessment("failed", reason, evidence)
        # multiWriter (PD) and READ_WRITE_MANY (Hyperdisk) both let writers share the disk.
        if disk.get("multiWriter") is True or disk.get("accessMode") == "READ_WRITE_MANY":
            return Assessment("failed", "verification_failed: disk is multi-writer", evidence)
        if status in DISK_PREFETCHING:
            return Assessment("prefetching", f"disk {status.lower()}", evidence)
        if status != "READY":
            return Assessment("missing", "disk not usable", evidence)
        for field in ("sourceSnapshotId", "sourceImageId", "type"):
            if disk.get(field):
                evidence[field] = str(disk[field])
        return Assessment("present", None, evidence)

    def plan(self, disk: dict[str, Any], target: Target) -> dict[str, Any]:
        link = disk.get("selfLink") or f"zones/{target.location}/disks/{disk.get('name')}"
        # `mode: READ_ONLY` lets many VMs in the zone attach the same disk; accessMode
        # (READ_ONLY_MANY) would only apply to Hyperdisk.
        return {"provider": "gcp", "read_only": True, "zone": target.location,
                "attachedDisks": [{"source": link, "mode": "READ_ONLY", "boot": False,
                                   "autoDelete": False,
                                   "deviceName": str(disk.get("name", ""))}]}
