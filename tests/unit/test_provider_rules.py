"""Pure verification rules over provider-shaped JSON: every listed failure has its precise reason,
and no failing artifact ever reads `present`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infercrane.domain.providers.aws import PREFETCH_KEY_TAG, AwsRules, fast_snapshot_restore_step
from infercrane.domain.providers.gcp import GcpRules
from infercrane.domain.providers.kubernetes import DIGEST_ANNOTATION, KubernetesRules
from infercrane.domain.providers.message import AdapterMessage, Target
from infercrane.domain.providers.model import binding, check_binding

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
AWS_T = Target.of("demo", "pf_1", DIGEST, "aws", "us-east-1a", "snap-0123456789abcdef0")
GCP_T = Target.of("demo", "pf_1", DIGEST, "gcp", "us-central1-a",
                  "projects/models/global/snapshots/llama")
K8S_T = Target.of("demo", "pf_1", DIGEST, "kubernetes", "prod/ml", "llama-snap")


def snapshot(**over):
    base = {"SnapshotId": AWS_T.source, "State": "completed", "Encrypted": True,
            "KmsKeyId": "arn:aws:kms:us-east-1:111122223333:key/k-1", "OwnerId": "111122223333",
            "StorageTier": "standard", "Description": f"model {binding(DIGEST)}"}
    return base | over


def volume(**over):
    base = {"VolumeId": "vol-1", "State": "available", "AvailabilityZone": "us-east-1a",
            "SnapshotId": AWS_T.source, "Encrypted": True,
            "Tags": [{"Key": PREFETCH_KEY_TAG, "Value": AWS_T.key}]}
    return base | over


# -- AWS -------------------------------------------------------------------------------------
def test_aws_accepts_a_completed_encrypted_standard_snapshot_bound_in_its_description():
    verdict = AwsRules("k-1", "111122223333").check_source(snapshot(), AWS_T)
    assert verdict.status == "ok"
    assert verdict.evidence["binding"] == "description"


@pytest.mark.parametrize(("over", "reason"), [
    ({"Encrypted": False}, "verification_failed: snapshot not encrypted"),
    ({"Description": f"model {binding(OTHER)}"},
     "verification_failed: digest mismatch in snapshot description"),
    ({"Description": "no binding here"},
     "verification_failed: digest not bound in snapshot description"),
    ({"StorageTier": "archive"}, "verification_failed: snapshot is not in the standard tier "
                                 "(restore an archived snapshot first)"),
    ({"KmsKeyId": "arn:aws:kms:us-east-1:111122223333:key/other"},
     "verification_failed: snapshot KMS key is not the expected key"),
    ({"OwnerId": "999999999999"},
     "verification_failed: snapshot owner is not the expected account"),
    ({"State": "error"}, "verification_failed: snapshot not completed"),
])
def test_aws_refuses_snapshots_that_break_the_contract_with_a_precise_reason(over, reason):
    verdict = AwsRules("k-1", "111122223333").check_source(snapshot(**over), AWS_T)
    assert (verdict.status, verdict.reason) == ("fail", reason)


def test_aws_never_accepts_a_binding_that_lives_only_in_tags():
    snap = snapshot(Description="", Tags=[{"Key": "infercrane:model", "Value": DIGEST}])
    assert AwsRules().check_source(snap, AWS_T).status == "fail"


def test_aws_waits_for_a_pending_snapshot_instead_of_failing_it():
    assert AwsRules().check_source(snapshot(State="pending"), AWS_T).status == "wait"


@pytest.mark.parametrize(("over", "facts", "state"), [
    ({}, {}, "present"),
    ({"State": "creating"}, {}, "prefetching"),
    # FSR was awaited before the volume was created: its state afterwards is evidence only.
    ({}, {"fast_snapshot_restore": "disabling"}, "present"),
    ({"AvailabilityZone": "us-east-1b"}, {}, "failed"),
    ({"Encrypted": False}, {}, "failed"),
    ({"State": "error"}, {}, "missing"),
])
def test_aws_volume_states_map_to_cache_states(over, facts, state):
    assert AwsRules().assess(volume(**over), AWS_T, facts).state == state


# EC2's FSR states: enabling -> optimizing -> enabled; disabling -> disabled (or no entry).
@pytest.mark.parametrize(("fsr", "volume_state", "step"), [
    # Before the volume exists: only `enabled` initializes a volume at creation.
    (None, None, "enable"),
    ("disabled", None, "enable"),
    ("disabling", None, "enable"),
    ("enabling", None, "wait"),
    ("optimizing", None, "wait"),
    ("enabled", None, "create"),
    # While the volume is created FSR is still doing its work.
    ("enabled", "creating", "keep"),
    # Once the volume left `creating`, ready or not, every billed state is stopped.
    ("enabled", "available", "disable"),
    ("enabled", "in-use", "disable"),
    ("optimizing", "available", "disable"),
    ("enabling", "error", "disable"),
    ("disabling", "available", "keep"),
    (None, "available", "keep"),
])
def test_aws_fast_snapshot_restore_is_awaited_before_the_volume_and_stopped_after_it(
        fsr, volume_state, step):
    vol = None if volume_state is None else volume(State=volume_state)
    assert fast_snapshot_restore_step(fsr, vol) == step


def test_aws_evidence_says_whether_ec2_fast_restored_the_volume():
    got = AwsRules().assess(volume(FastRestored=False), AWS_T, {"fast_snapshot_restore": "disabling"})
    assert got.evidence["fast_restored"] == "false"
    assert got.evidence["fast_snapshot_restore"] == "disabling"


def test_aws_wrong_zone_volume_is_a_precise_verification_failure():
    got = AwsRules().assess(volume(AvailabilityZone="us-east-1b"), AWS_T, {})
    assert got.reason == "verification_failed: volume in wrong availability zone"


def test_aws_plan_mounts_read_only_because_ebs_attach_has_no_read_only_flag():
    plan = AwsRules().plan(volume(), AWS_T)
    assert plan["read_only"] is True
    assert "ro" in plan["mount"]["options"]
    assert plan["mount"]["command"].startswith("mount -o ro")
    assert plan["kubernetes"]["csi"]["readOnly"] is True


# -- GCP -------------------------------------------------------------------------------------
def disk(**over):
    base = {"name": GCP_T.name, "status": "READY", "description": binding(DIGEST),
            "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
            "selfLink": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/"
                        f"disks/{GCP_T.name}",
            "labels": {"infercrane-prefetch-key": GCP_T.key}}
    return base | over


@pytest.mark.parametrize(("status", "state"), [
    ("READY", "present"), ("CREATING", "prefetching"), ("RESTORING", "prefetching"),
    ("FAILED", "missing"), ("DELETING", "missing"), ("UNAVAILABLE", "missing"),
])
def test_gcp_disk_status_maps_to_cache_state(status, state):
    assert GcpRules().assess(disk(status=status), GCP_T, {}).state == state


@pytest.mark.parametrize(("over", "reason"), [
    ({"zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b"},
     "verification_failed: disk in wrong zone"),
    ({"description": binding(OTHER)}, "verification_failed: digest mismatch in disk description"),
    ({"multiWriter": True}, "verification_failed: disk is multi-writer"),
    ({"accessMode": "READ_WRITE_MANY"}, "verification_failed: disk is multi-writer"),
])
def test_gcp_refuses_disks_that_break_the_contract(over, reason):
    got = GcpRules().assess(disk(**over), GCP_T, {})
    assert (got.state, got.reason) == ("failed", reason)


def test_gcp_source_not_found_and_mismatch_are_failures():
    assert GcpRules().check_source(None, GCP_T).reason == \
        "verification_failed: source snapshot not found"
    got = GcpRules().check_source({"status": "READY", "description": binding(OTHER)}, GCP_T)
    assert got.reason == "verification_failed: digest mismatch in snapshot description"


def test_gcp_attach_plan_is_read_only():
    plan = GcpRules().plan(disk(), GCP_T)
    assert [d["mode"] for d in plan["attachedDisks"]] == ["READ_ONLY"]


# -- Kubernetes ------------------------------------------------------------------------------
def pvc(modes=("ReadOnlyMany",), phase="Bound", digest=DIGEST, **spec):
    return {"metadata": {"name": K8S_T.name, "namespace": "ml",
                         "annotations": {DIGEST_ANNOTATION: digest},
                         "labels": {"infercrane.dev/prefetch-key": K8S_T.key}},
            "spec": {"accessModes": list(modes),
                     "dataSource": {"kind": "VolumeSnapshot", "name": K8S_T.source,
                                    "apiGroup": "snapshot.storage.k8s.io"}, **spec},
            "status": {"phase": phase}}


def test_kubernetes_read_write_once_only_pvc_is_a_precise_verification_failure():
    got = KubernetesRules().assess(pvc(modes=("ReadWriteOnce",)), K8S_T, {})
    assert got.state == "failed"
    assert got.reason == ("verification_failed: PVC access modes allow no multi-reader mount "
                          "(ReadWriteOnce only)")


@pytest.mark.parametrize("modes", [("ReadOnlyMany",), ("ReadWriteMany",),
                                   ("ReadWriteOnce", "ReadOnlyMany")])
def test_kubernetes_bound_multi_reader_pvc_is_present(modes):
    assert KubernetesRules().assess(pvc(modes=modes), K8S_T, {}).state == "present"


def test_kubernetes_pending_on_first_consumer_is_prefetching_with_that_reason():
    got = KubernetesRules().assess(pvc(phase="Pending"), K8S_T,
                                   {"volume_binding_mode": "WaitForFirstConsumer"})
    assert got.state == "prefetching"
    assert got.reason.startswith("waiting_for_first_consumer")


def test_kubernetes_annotation_mismatch_and_lost_claim_are_never_present():
    assert KubernetesRules().assess(pvc(digest=OTHER), K8S_T, {}).reason == \
        "verification_failed: digest mismatch in PVC annotation"
    assert KubernetesRules().assess(pvc(phase="Lost"), K8S_T, {}).state == "missing"


def test_kubernetes_mount_plan_is_read_only_on_both_the_volume_and_the_mount():
    plan = KubernetesRules().plan(pvc(modes=("ReadWriteMany",)), K8S_T)
    assert plan["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert all(m["readOnly"] is True for m in plan["volumeMounts"])


def test_kubernetes_created_manifest_asks_for_read_only_many_from_the_snapshot():
    m = KubernetesRules().manifest(K8S_T, "10Gi", None)
    assert m["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert m["spec"]["dataSource"]["name"] == K8S_T.source
    assert m["metadata"]["annotations"][DIGEST_ANNOTATION] == DIGEST


# -- binding and names -----------------------------------------------------------------------
hexes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@given(hexes, hexes, st.text(max_size=20))
def test_binding_accepts_exactly_the_bound_digest(a, b, noise):
    text = f"{noise} {binding('sha256:' + a)} {noise}"
    assert (check_binding(text, "sha256:" + b, "x") is None) == (a == b)


@given(hexes, st.sampled_from("0123456789abcdef"))
def test_binding_refuses_a_longer_digest_that_starts_with_the_right_one(a, extra):
    assert check_binding(binding("sha256:" + a) + extra, "sha256:" + a, "x") is not None


@given(st.sampled_from(["demo", "other"]), hexes, st.sampled_from(["aws", "gcp", "kubernetes"]))
def test_names_are_deterministic_and_valid_for_every_provider(tenant, hexd, adapter):
    a = Target.of(tenant, "pf_1", "sha256:" + hexd, adapter, "us-east-1a", "s")
    b = Target.of(tenant, "pf_2", "sha256:" + hexd, adapter, "us-east-1a", "s2")
    assert a.name == b.name
    assert a.key == b.key
    assert len(a.name) <= 63
    assert a.name[0].isalpha()
    assert a.name.replace("-", "").isalnum()
    assert len(a.client_token) <= 64
    assert a.request_uuid("insert") != b.request_uuid("insert")  # a new request, a new requestId


def test_other_tenants_prefetch_has_another_key():
    assert Target.of("demo", "r", DIGEST, "aws", "us-east-1a", "s").key != \
        Target.of("other", "r", DIGEST, "aws", "us-east-1a", "s").key


def test_message_refuses_a_malformed_digest_without_echoing_it():
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        AdapterMessage.model_validate({"schema": "infercrane.prefetch/v1", "action": "prefetch",
                                       "tenant": "demo", "request_id": "r", "model": "sha256:zz",
                                       "adapter": "aws", "location": "us-east-1a", "source": "s"})
    assert "sha256:zz" not in str(err.value)


def test_kubernetes_source_may_name_its_namespace_but_only_the_target_one():
    ok = Target.of("demo", "r", DIGEST, "kubernetes", "prod/ml", "ml/llama-snap")
    snap = {"metadata": {"name": "llama-snap", "annotations": {DIGEST_ANNOTATION: DIGEST}},
            "status": {"readyToUse": True}}
    assert KubernetesRules().check_source(snap, ok).status == "ok"
    elsewhere = Target.of("demo", "r", DIGEST, "kubernetes", "prod/ml", "team/llama-snap")
    assert KubernetesRules().check_source(snap, elsewhere).reason == \
        "verification_failed: volume snapshot in another namespace"
