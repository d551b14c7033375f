"""Kubernetes rules over the API server's JSON (PersistentVolumeClaim, VolumeSnapshot,
StorageClass). Pure.

The digest binding is an annotation on both the VolumeSnapshot and the PVC. Annotations are
editable, so infra/kubernetes/ ships a ValidatingAdmissionPolicy that makes the annotation
immutable and RBAC that limits who can write these objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import Assessment, Verdict

DIGEST_ANNOTATION = "infercrane.dev/model-digest"
PREFETCH_KEY_LABEL = "infercrane.dev/prefetch-key"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_MANY = ("ReadOnlyMany", "ReadWriteMany")


def _annotation(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)


def _binding_reason(obj: dict[str, Any], model: str, what: str) -> str | None:
    value = _annotation(obj)
    if value is None:
        return f"verification_failed: digest annotation missing on {what}"
    if value != model:
        return f"verification_failed: digest mismatch in {what} annotation"
    return None


@dataclass(frozen=True)
class KubernetesRules:
    provider: str = "kubernetes"

    def check_source(self, snap: dict[str, Any] | None, target: Target) -> Verdict:
        namespace, _ = target.snapshot_ref()
        if namespace is not None and namespace != target.split_location()[1]:
            # A PVC can only be restored from a VolumeSnapshot in its own namespace.
            return Verdict.fail("verification_failed: volume snapshot in another namespace")
        if snap is None:
            return Verdict.fail("verification_failed: volume snapshot not found")
        reason = _binding_reason(snap, target.model, "volume snapshot")
        if reason:
            return Verdict.fail(reason)
        status = snap.get("status") or {}
        if status.get("error"):
            return Verdict.fail("verification_failed: volume snapshot has an error")
        if status.get("readyToUse") is not True:
            return Verdict.wait("volume snapshot not ready to use")
        ev = {"volume_snapshot": str((snap.get("metadata") or {}).get("name", "")),
              "binding": "annotation"}
        if status.get("restoreSize"):
            ev["restore_size"] = str(status["restoreSize"])
        return Verdict("ok", None, ev)

    def resource_id(self, pvc: dict[str, Any]) -> str:
        return str(pvc["metadata"]["name"])

    def owned(self, pvc: dict[str, Any], target: Target) -> bool:
        labels = (pvc.get("metadata") or {}).get("labels") or {}
        return labels.get(PREFETCH_KEY_LABEL) == target.key

    def assess(self, pvc: dict[str, Any], target: Target, facts: dict[str, str]) -> Assessment:
        spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
        phase = str(status.get("phase", "Pending"))
        evidence = {"pvc": str((pvc.get("metadata") or {}).get("name", "")), "phase": phase,
                    "namespace": str((pvc.get("metadata") or {}).get("namespace", ""))}
        reason = _binding_reason(pvc, target.model, "PVC")
        if reason:
            return Assessment("failed", reason, evidence)
        modes = list(spec.get("accessModes") or [])
        evidence["access_modes"] = ",".join(modes)
        if not any(m in READ_MANY for m in modes):
            return Assessment("failed", "verification_failed: PVC access modes allow no "
                              "multi-reader mount (ReadWriteOnce only)", evidence)
        source = spec.get("dataSourceRef") or spec.get("dataSource") or {}
        if source and (source.get("kind") != "VolumeSnapshot"
                       or source.get("name") != target.snapshot_ref()[1]):
            return Assessment("failed", "verification_failed: PVC not restored from the source "
                              "volume snapshot", evidence)
        if phase == "Pending":
            if facts.get("volume_binding_mode") == WAIT_FOR_FIRST_CONSUMER:
                evidence["volume_binding_mode"] = WAIT_FOR_FIRST_CONSUMER
                return Assessment("prefetching", "waiting_for_first_consumer: the storage class "
                                  "binds when a pod first mounts the claim", evidence)
            return Assessment("prefetching", "PVC provisioning", evidence)
        if phase != "Bound":
            return Assessment("missing", f"PVC {phase.lower()}", evidence)
        if spec.get("volumeName"):
            evidence["volume_name"] = str(spec["volumeName"])
        return Assessment("present", None, evidence)

    def plan(self, pvc: dict[str, Any], target: Target) -> dict[str, Any]:
        _, namespace = target.split_location()
        name = self.resource_id(pvc)
        return {"provider": "kubernetes", "read_only": True, "namespace": namespace,
                "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": name,
                                                                        "readOnly": True}}],
                "volumeMounts": [{"name": "model", "readOnly": True,
                                  "mountPath": f"/models/{target.digest_hex[:12]}"}]}

    def manifest(self, target: Target, restore_size: str, storage_class: str | None
                 ) -> dict[str, Any]:
        """The PVC the adapter creates: ReadOnlyMany, restored from the VolumeSnapshot, bound to
        the digest by annotation and to the prefetch by label."""
        _, namespace = target.split_location()
        spec: dict[str, Any] = {
            "accessModes": ["ReadOnlyMany"],
            "resources": {"requests": {"storage": restore_size}},
            "dataSource": {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot",
                           "name": target.snapshot_ref()[1]},
        }
        if storage_class:
            spec["storageClassName"] = storage_class
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": target.name, "namespace": namespace,
                             "annotations": {DIGEST_ANNOTATION: target.model},
                             "labels": {PREFETCH_KEY_LABEL: target.key,
                                        MANAGED_BY_LABEL: "infercrane"}},
                "spec": spec}
