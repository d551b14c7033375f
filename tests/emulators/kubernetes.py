"""EMULATOR of a Kubernetes API server, for PVC / PV / VolumeSnapshot / StorageClass only (not
Kubernetes' code).

Serves the documented JSON with `metadata.uid`, `creationTimestamp` and a cluster-wide
increasing `resourceVersion`; failures are `Status` objects (`reason: NotFound` 404,
`AlreadyExists` 409, `Invalid` 422). A built-in stand-in for the CSI external-provisioner binds a
PVC restored from a ready VolumeSnapshot after `bind_after_s` when its StorageClass is
`Immediate`; a `WaitForFirstConsumer` class leaves it `Pending` until a consumer appears
(`POST /_emulator/consume/<ns>/<pvc>`, what scheduling a pod that mounts it would do).
Seed with `add_volume_snapshot` / `add_storage_class` / `add_pvc` or `POST /_emulator/seed`.
"""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from tests.emulators._http import JsonEmulator

NS = "/api/v1/namespaces/(?P<ns>[^/]+)"
SNAP = "/apis/snapshot.storage.k8s.io/v1/namespaces/(?P<ns>[^/]+)/volumesnapshots"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, name: str = "", kind: str = "") -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": {"name": name, "kind": kind},
            "code": code}


class KubernetesEmulator(JsonEmulator):
    def __init__(self, bind_after_s: float = 0.0):
        super().__init__()
        self.bind_after_s = bind_after_s
        self._rv = itertools.count(1000)
        self.pvcs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pvs: dict[str, dict[str, Any]] = {}
        self.snapshots: dict[tuple[str, str], dict[str, Any]] = {}
        self.storage_classes: dict[str, dict[str, Any]] = {}
        self._bind_at: dict[tuple[str, str], float] = {}
        self._consumed: set[tuple[str, str]] = set()
        self.creates = 0
        self.add_storage_class("standard-rox", "Immediate", default=True)
        self.add_storage_class("wffc-rox", "WaitForFirstConsumer")
        pvc = NS + "/persistentvolumeclaims"
        self.route("GET", pvc + "/(?P<name>[^/]+)", self._get_pvc)
        self.route("POST", pvc, self._create_pvc)
        self.route("DELETE", pvc + "/(?P<name>[^/]+)", self._delete_pvc)
        self.route("GET", "/api/v1/persistentvolumes/(?P<name>[^/]+)", self._get_pv)
        self.route("GET", SNAP + "/(?P<name>[^/]+)", self._get_snapshot)
        self.route("POST", SNAP, self._create_snapshot)
        self.route("GET", "/apis/storage.k8s.io/v1/storageclasses/(?P<name>[^/]+)", self._get_sc)
        self.route("POST", "/_emulator/consume/(?P<ns>[^/]+)/(?P<name>[^/]+)", self._consume)
        self.route("POST", "/_emulator/seed", self._seed)

    def not_routed(self, method: str, path: str) -> Any:
        return status(404, "NotFound", "the server could not find the requested resource")

    def fault_body(self, code: int, reason: str) -> Any:
        return status(code, reason, f"injected {reason}")

    def _meta(self, meta: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        out = {**meta, "uid": str(uuid.uuid4()), "resourceVersion": str(next(self._rv)),
               "creationTimestamp": _now()}
        if namespace is not None:
            out["namespace"] = namespace
        return out

    def _touch(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))

    # -- seeding -------------------------------------------------------------------------------
    def add_storage_class(self, name: str, binding_mode: str, default: bool = False
                          ) -> dict[str, Any]:
        ann = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
        doc = {"kind": "StorageClass", "apiVersion": "storage.k8s.io/v1",
               "metadata": self._meta({"name": name, "annotations": ann}, None),
               "provisioner": "emulator.csi.example.com", "reclaimPolicy": "Delete",
               "volumeBindingMode": binding_mode, "allowVolumeExpansion": False}
        self.storage_classes[name] = doc
        return doc

    def add_volume_snapshot(self, namespace: str, name: str, annotations: dict[str, str],
                            ready: bool = True, restore_size: str = "10Gi",
                            error: dict[str, Any] | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": self._meta({"name": name, "annotations": dict(annotations)}, namespace),
            "spec": {"volumeSnapshotClassName": "emulator-snapclass",
                     "source": {"volumeSnapshotContentName": f"snapcontent-{name}"}},
            "status": {"readyToUse": ready, "restoreSize": restore_size,
                       "boundVolumeSnapshotContentName": f"snapcontent-{name}",
                       "creationTime": _now()},
        }
        if error:
            doc["status"]["error"] = error
        self.snapshots[(namespace, name)] = doc
        return doc

    def add_pvc(self, pvc: dict[str, Any]) -> dict[str, Any]:
        """Store a claim as given (its status included): for tests of claims made by others."""
        ns = pvc["metadata"]["namespace"]
        doc = {**pvc, "metadata": self._meta(pvc["metadata"], ns)}
        self.pvcs[(ns, doc["metadata"]["name"])] = doc
        return doc

    def _seed(self, _m: Any, _q: dict[str, str], body: Any) -> tuple[int, Any]:
        for s in (body or {}).get("volumesnapshots", []):
            self.add_volume_snapshot(s["namespace"], s["name"], s.get("annotations", {}),
                                     s.get("ready", True), s.get("restoreSize", "10Gi"))
        return 200, {"ok": True}

    # -- PVCs ----------------------------------------------------------------------------------
    def _class_of(self, pvc: dict[str, Any]) -> dict[str, Any] | None:
        name = pvc["spec"].get("storageClassName")
        if name:
            return self.storage_classes.get(name)
        return next((sc for sc in self.storage_classes.values()
                     if sc["metadata"]["annotations"].get(
                         "storageclass.kubernetes.io/is-default-class") == "true"), None)

    def _provision(self, key: tuple[str, str]) -> None:
        pvc = self.pvcs.get(key)
        if pvc is None or pvc["status"].get("phase") != "Pending" or key not in self._bind_at:
            return
        sc = self._class_of(pvc)
        if sc is None:
            return
        if sc["volumeBindingMode"] == "WaitForFirstConsumer" and key not in self._consumed:
            return
        src = pvc["spec"].get("dataSource") or {}
        if src.get("kind") == "VolumeSnapshot":
            snap = self.snapshots.get((key[0], src.get("name", "")))
            if snap is None or snap["status"].get("readyToUse") is not True:
                return  # the provisioner keeps waiting for a ready snapshot
        if time.monotonic() < self._bind_at[key]:
            return
        pv_name = f"pvc-{pvc['metadata']['uid']}"
        size = pvc["spec"]["resources"]["requests"]["storage"]
        self.pvs[pv_name] = {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": self._meta({"name": pv_name}, None),
            "spec": {"capacity": {"storage": size}, "accessModes": pvc["spec"]["accessModes"],
                     "claimRef": {"kind": "PersistentVolumeClaim", "namespace": key[0],
                                  "name": key[1], "uid": pvc["metadata"]["uid"]},
                     "persistentVolumeReclaimPolicy": "Delete",
                     "storageClassName": sc["metadata"]["name"],
                     "csi": {"driver": sc["provisioner"], "volumeHandle": pv_name}},
            "status": {"phase": "Bound"},
        }
        pvc["spec"]["volumeName"] = pv_name
        pvc["spec"].setdefault("storageClassName", sc["metadata"]["name"])
        pvc["status"] = {"phase": "Bound", "accessModes": pvc["spec"]["accessModes"],
                         "capacity": {"storage": size}}
        self._touch(pvc)

    def _get_pvc(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        key = (m["ns"], m["name"])
        self._provision(key)
        if key not in self.pvcs:
            return 404, status(404, "NotFound",
                               f'persistentvolumeclaims "{m["name"]}" not found', m["name"],
                               "persistentvolumeclaims")
        return 200, self.pvcs[key]

    def _create_pvc(self, m: Any, _q: dict[str, str], body: Any) -> tuple[int, Any]:
        ns = m["ns"]
        meta = (body or {}).get("metadata") or {}
        name = meta.get("name", "")
        spec = (body or {}).get("spec") or {}
        if not name or not spec.get("accessModes") or \
                not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            return 422, status(422, "Invalid", "PersistentVolumeClaim is invalid", name,
                               "PersistentVolumeClaim")
        if (ns, name) in self.pvcs:
            return 409, status(409, "AlreadyExists",
                               f'persistentvolumeclaims "{name}" already exists', name,
                               "persistentvolumeclaims")
        doc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": self._meta({k: v for k, v in meta.items() if k != "namespace"}, ns),
               "spec": {**spec, "volumeMode": spec.get("volumeMode", "Filesystem")},
               "status": {"phase": "Pending"}}
        sc = self._class_of(doc)
        if sc is not None:
            doc["spec"].setdefault("storageClassName", sc["metadata"]["name"])
        self.pvcs[(ns, name)] = doc
        self._bind_at[(ns, name)] = time.monotonic() + self.bind_after_s
        self.creates += 1
        return 201, doc

    def _delete_pvc(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        key = (m["ns"], m["name"])
        doc = self.pvcs.pop(key, None)
        if doc is None:
            return 404, status(404, "NotFound", f'persistentvolumeclaims "{m["name"]}" not found',
                               m["name"], "persistentvolumeclaims")
        pv = doc["spec"].get("volumeName")
        if pv:
            self.pvs.pop(pv, None)  # reclaimPolicy Delete
        doc["metadata"]["deletionTimestamp"] = _now()
        return 200, doc

    def _consume(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        self._consumed.add((m["ns"], m["name"]))
        return 200, {"ok": True}

    # -- others --------------------------------------------------------------------------------
    def _get_pv(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        doc = self.pvs.get(m["name"])
        if doc is None:
            return 404, status(404, "NotFound", f'persistentvolumes "{m["name"]}" not found',
                               m["name"], "persistentvolumes")
        return 200, doc

    def _get_snapshot(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        doc = self.snapshots.get((m["ns"], m["name"]))
        if doc is None:
            return 404, status(404, "NotFound", f'volumesnapshots.snapshot.storage.k8s.io '
                               f'"{m["name"]}" not found', m["name"], "volumesnapshots")
        return 200, doc

    def _create_snapshot(self, m: Any, _q: dict[str, str], body: Any) -> tuple[int, Any]:
        meta = (body or {}).get("metadata") or {}
        if (m["ns"], meta.get("name")) in self.snapshots:
            return 409, status(409, "AlreadyExists", f'volumesnapshots.snapshot.storage.k8s.io '
                               f'"{meta.get("name")}" already exists', meta.get("name", ""),
                               "volumesnapshots")
        doc = self.add_volume_snapshot(m["ns"], meta.get("name", ""),
                                       meta.get("annotations") or {})
        return 201, doc

    def _get_sc(self, m: Any, _q: dict[str, str], _b: Any) -> tuple[int, Any]:
        doc = self.storage_classes.get(m["name"])
        if doc is None:
            return 404, status(404, "NotFound", f'storageclasses.storage.k8s.io "{m["name"]}" '
                               "not found", m["name"], "storageclasses")
        return 200, doc
