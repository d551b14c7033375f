"""EMULATOR of the Compute Engine v1 REST API, disks/snapshots/images only (not Google's code).

Serves the documented JSON (`compute#disk`, `compute#operation`, error bodies with
`errors[].reason` such as `notFound`/`alreadyExists`) at the paths google-cloud-compute's REST
transport calls. Disk lifecycle: an insert answers a RUNNING operation and the disk reads
`RESTORING` (from a snapshot) or `CREATING` (from an image) until `ready_after_s` has passed,
then `READY`. Inserts are deduplicated by `requestId` as GCE does; a second insert of an existing
name with another requestId is a 409. Seed with `add_snapshot`/`add_image`/`add_disk` or
`POST /_emulator/seed`.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from datetime import UTC, datetime
from typing import Any

from tests.emulators._http import JsonEmulator

BASE = "https://www.googleapis.com/compute/v1"
P = "/compute/v1/projects/(?P<project>[^/]+)"
_ids = itertools.count(4_000_000_000_000_000_001)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "-00:00")


def _error(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message,
                      "errors": [{"message": message, "domain": "global", "reason": reason}]}}


class GceEmulator(JsonEmulator):
    def __init__(self, ready_after_s: float = 0.0):
        super().__init__()
        self.ready_after_s = ready_after_s
        self.disks: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.snapshots: dict[tuple[str, str], dict[str, Any]] = {}
        self.images: dict[tuple[str, str], dict[str, Any]] = {}
        self._ready_at: dict[tuple[str, str, str], float] = {}
        self._operations: dict[str, dict[str, Any]] = {}
        self.inserts = 0  # disks actually created (deduplicated inserts do not count)
        zone = "/zones/(?P<zone>[^/]+)/disks"
        self.route("GET", P + zone + "/(?P<name>[^/]+)", self._get_disk)
        self.route("POST", P + zone, self._insert_disk)
        self.route("DELETE", P + zone + "/(?P<name>[^/]+)", self._delete_disk)
        self.route("GET", P + "/global/snapshots/(?P<name>[^/]+)", self._get_global("snapshots"))
        self.route("GET", P + "/global/images/(?P<name>[^/]+)", self._get_global("images"))
        self.route("POST", "/_emulator/seed", self._seed)

    def not_routed(self, method: str, path: str) -> Any:
        return _error(404, "notFound", f"The resource '{path}' was not found")

    def fault_body(self, status: int, reason: str) -> Any:
        return _error(status, reason, f"Injected {reason}.")

    # -- seeding -------------------------------------------------------------------------------
    def add_snapshot(self, project: str, name: str, description: str, status: str = "READY",
                     **extra: Any) -> dict[str, Any]:
        doc = {"kind": "compute#snapshot", "id": str(next(_ids)), "name": name,
               "description": description, "status": status, "creationTimestamp": _now(),
               "diskSizeGb": "10", "storageBytes": "1073741824",
               "selfLink": f"{BASE}/projects/{project}/global/snapshots/{name}", **extra}
        self.snapshots[(project, name)] = doc
        return doc

    def add_image(self, project: str, name: str, description: str, status: str = "READY",
                  **extra: Any) -> dict[str, Any]:
        doc = {"kind": "compute#image", "id": str(next(_ids)), "name": name,
               "description": description, "status": status, "creationTimestamp": _now(),
               "diskSizeGb": "10", "selfLink": f"{BASE}/projects/{project}/global/images/{name}",
               **extra}
        self.images[(project, name)] = doc
        return doc

    def add_disk(self, project: str, zone: str, disk: dict[str, Any]) -> dict[str, Any]:
        doc = self._disk_doc(project, zone, disk, disk.get("status", "READY"))
        self.disks[(project, zone, doc["name"])] = doc
        return doc

    def _seed(self, _m: Any, _q: dict[str, str], body: Any) -> tuple[int, Any]:
        body = body or {}
        for s in body.get("snapshots", []):
            self.add_snapshot(s["project"], s["name"], s.get("description", ""),
                              s.get("status", "READY"))
        for i in body.get("images", []):
            self.add_image(i["project"], i["name"], i.get("description", ""),
                           i.get("status", "READY"))
        for d in body.get("disks", []):
            self.add_disk(d.pop("project"), d.pop("zoneName"), d)
        return 200, {"ok": True}

    # -- disks ---------------------------------------------------------------------------------
    def _disk_doc(self, project: str, zone: str, body: dict[str, Any], status: str
                  ) -> dict[str, Any]:
        name = body["name"]
        doc: dict[str, Any] = {
            "kind": "compute#disk", "id": str(next(_ids)), "creationTimestamp": _now(),
            "name": name, "description": body.get("description", ""),
            "sizeGb": str(body.get("sizeGb", "10")),
            "zone": f"{BASE}/projects/{project}/zones/{zone}", "status": status,
            "selfLink": f"{BASE}/projects/{project}/zones/{zone}/disks/{name}",
            "type": body.get("type") or f"{BASE}/projects/{project}/zones/{zone}/diskTypes/pd-balanced",
            "labels": dict(body.get("labels") or {}),
            "labelFingerprint": hashlib.sha256(repr(sorted((body.get("labels") or {}).items()))
                                               .encode()).hexdigest()[:12],
            "physicalBlockSizeBytes": "4096",
        }
        for k in ("sourceSnapshot", "sourceImage"):
            if body.get(k):
                kind = "snapshots" if k == "sourceSnapshot" else "images"
                ref = body[k].split("/global/", 1)[-1].split("/", 1)[-1]
                src_project = body[k].split("projects/", 1)[-1].split("/", 1)[0]
                doc[k] = f"{BASE}/projects/{src_project}/global/{kind}/{ref}"
                src = (self.snapshots if kind == "snapshots" else self.images).get(
                    (src_project, ref))
                if src:
                    doc[f"{k}Id"] = src["id"]
        for k in ("multiWriter", "accessMode"):
            if k in body:
                doc[k] = body[k]
        return doc

    def _disk(self, project: str, zone: str, name: str) -> dict[str, Any] | None:
        key = (project, zone, name)
        doc = self.disks.get(key)
        if doc is not None and doc["status"] in ("CREATING", "RESTORING") \
                and time.monotonic() >= self._ready_at.get(key, 0.0):
            doc["status"] = "READY"
        return doc

    def _get_disk(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        p, z, n = m["project"], m["zone"], m["name"]
        doc = self._disk(p, z, n)
        if doc is None:
            return 404, _error(404, "notFound",
                               f"The resource 'projects/{p}/zones/{z}/disks/{n}' was not found")
        return 200, doc

    def _operation(self, project: str, zone: str, op_type: str, target: dict[str, Any],
                   status: str) -> dict[str, Any]:
        name = f"operation-{int(time.time() * 1000)}-{next(_ids)}"
        return {"kind": "compute#operation", "id": str(next(_ids)), "name": name,
                "zone": f"{BASE}/projects/{project}/zones/{zone}", "operationType": op_type,
                "targetLink": target["selfLink"], "targetId": target["id"], "status": status,
                "user": "emulator@example.com", "progress": 0 if status != "DONE" else 100,
                "insertTime": _now(), "startTime": _now(),
                "selfLink": f"{BASE}/projects/{project}/zones/{zone}/operations/{name}"}

    def _insert_disk(self, m: Any, q: dict[str, str], body: Any) -> tuple[int, Any]:
        p, z = m["project"], m["zone"]
        rid = q.get("requestId")
        if rid and rid in self._operations:
            return 200, self._operations[rid]  # GCE deduplicates a retried insert
        body = body or {}
        name = body.get("name", "")
        if self._disk(p, z, name) is not None:
            return 409, _error(409, "alreadyExists",
                               f"The resource 'projects/{p}/zones/{z}/disks/{name}' already exists")
        for k, store, kind in (("sourceSnapshot", self.snapshots, "snapshots"),
                               ("sourceImage", self.images, "images")):
            if body.get(k):
                ref = body[k].split(f"/global/{kind}/", 1)[-1]
                src_project = body[k].split("projects/", 1)[-1].split("/", 1)[0]
                if (src_project, ref) not in store:
                    return 404, _error(404, "notFound", f"The resource 'projects/{src_project}"
                                       f"/global/{kind}/{ref}' was not found")
        status = "RESTORING" if body.get("sourceSnapshot") else "CREATING"
        doc = self._disk_doc(p, z, body, status)
        self.disks[(p, z, name)] = doc
        self._ready_at[(p, z, name)] = time.monotonic() + self.ready_after_s
        self.inserts += 1
        op = self._operation(p, z, "insert", doc, "RUNNING")
        if rid:
            self._operations[rid] = op
        return 200, op

    def _delete_disk(self, m: Any, q: dict[str, str], _b: Any) -> tuple[int, Any]:
        p, z, n = m["project"], m["zone"], m["name"]
        rid = q.get("requestId")
        if rid and rid in self._operations:
            return 200, self._operations[rid]
        doc = self.disks.pop((p, z, n), None)
        if doc is None:
            return 404, _error(404, "notFound",
                               f"The resource 'projects/{p}/zones/{z}/disks/{n}' was not found")
        op = self._operation(p, z, "delete", doc, "DONE")
        if rid:
            self._operations[rid] = op
        return 200, op

    def _get_global(self, kind: str) -> Any:
        def get(m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
            store = self.snapshots if kind == "snapshots" else self.images
            doc = store.get((m["project"], m["name"]))
            if doc is None:
                return 404, _error(404, "notFound", f"The resource 'projects/{m['project']}"
                                   f"/global/{kind}/{m['name']}' was not found")
            return 200, doc
        return get
