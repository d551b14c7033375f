"""The Kubernetes manifests in infra/ say what docs/adapters.md promises: the adapter cannot edit
claims, and the digest annotation is protected by an admission policy."""

from __future__ import annotations

import yaml

from infercrane.domain.providers.kubernetes import DIGEST_ANNOTATION
from tests.conftest import REPO

K8S = REPO / "infra" / "kubernetes"


def docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((K8S / name).read_text()))


def test_adapter_role_cannot_update_or_patch_claims_or_snapshots():
    roles = [d for d in docs("rbac.yaml") if d["kind"] in ("Role", "ClusterRole")]
    verbs = {v for r in roles for rule in r["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "create", "delete"}
    pvc_rules = [rule for r in roles for rule in r["rules"]
                 if "persistentvolumeclaims" in rule["resources"]]
    assert pvc_rules
    assert all("update" not in r["verbs"] and "patch" not in r["verbs"]
                             for r in pvc_rules)


def test_admission_policy_guards_the_digest_annotation_on_claims_and_snapshots():
    policy, binding = docs("admission-policy.yaml")
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    resources = {r for rule in policy["spec"]["matchConstraints"]["resourceRules"]
                 for r in rule["resources"]}
    assert resources == {"persistentvolumeclaims", "volumesnapshots"}
    text = yaml.safe_dump(policy)
    assert DIGEST_ANNOTATION in text
    assert any("immutable" in v["message"] for v in policy["spec"]["validations"])
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert "Deny" in binding["spec"]["validationActions"]
