"""Kubernetes adapter: the official kubernetes client against the local API-server emulator
(PVC / VolumeSnapshot / StorageClass), driven through the real prefetch and cache services."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from infercrane.adapters.kubernetes_pvc import ClusterClients, KubernetesPvcAdapter
from infercrane.bootstrap.providers import adapter_runner
from infercrane.domain.prefetch import adapter_message
from infercrane.domain.providers.kubernetes import DIGEST_ANNOTATION, KubernetesRules
from infercrane.domain.providers.message import Target
from tests.emulators.kubernetes import KubernetesEmulator

DIGEST = "sha256:" + "ab" * 32
LOCATION = "prod/ml"


@pytest.fixture(scope="module")
def k8s() -> Iterator[KubernetesEmulator]:
    emulator = KubernetesEmulator()
    emulator.start()
    emulator.add_volume_snapshot("ml", "llama-snap", {DIGEST_ANNOTATION: DIGEST})
    emulator.add_volume_snapshot("ml", "other-snap", {DIGEST_ANNOTATION: "sha256:" + "cd" * 32})
    yield emulator
    emulator.stop()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def make_runner(aws: Any, k8s: KubernetesEmulator, storage_class: str | None = None) -> Any:
    adapter = KubernetesPvcAdapter(ClusterClients(endpoint=k8s.endpoint),
                                   storage_class=storage_class)
    return adapter_runner(
        aws.container, adapter, KubernetesRules(), aws.settings.adapter_kubernetes_queue_url)


def body(aws: Any, tenant: str, source: str = "llama-snap", action: str = "prefetch"
         ) -> tuple[Any, str]:
    req, _ = aws.container.prefetch.request(tenant, DIGEST, "kubernetes", LOCATION, source)
    return req, json.dumps(adapter_message(req, action))


def test_pvc_is_restored_from_the_snapshot_and_reads_present_with_a_read_only_mount(
        aws, k8s, tenant):
    _req, msg = body(aws, tenant)
    runner = make_runner(aws, k8s)
    # A claim just created is Pending; the re-check (attempt 2) finds it Bound.
    assert runner.handle(msg).state == "prefetching"
    out = runner.handle(json.dumps(json.loads(msg) | {"attempt": 2}))
    assert out.state == "present"
    pvc = k8s.pvcs[("ml", out.resource_id)]
    assert pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pvc["metadata"]["annotations"][DIGEST_ANNOTATION] == DIGEST
    assert out.plan["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert out.plan["volumeMounts"][0]["readOnly"] is True
    [eff] = aws.container.cache.effective(tenant, DIGEST, "kubernetes", LOCATION)
    assert eff.document()["state"] == "present"


def test_redelivery_is_one_pvc_and_a_409_means_done(aws, k8s, tenant):
    req, msg = body(aws, tenant)
    runner = make_runner(aws, k8s, storage_class="wffc-rox")
    before = k8s.creates
    first = runner.handle(msg)
    # The claim exists, so find() sees it; force the create path to meet the 409 as a racing
    # delivery would.
    adapter = runner.adapter
    t = Target.of(tenant, req.id, DIGEST, "kubernetes", LOCATION, "llama-snap")
    again = adapter.create(t, k8s.snapshots[("ml", "llama-snap")])
    assert again["metadata"]["uid"] == k8s.pvcs[("ml", t.name)]["metadata"]["uid"]
    second = runner.handle(msg)
    assert k8s.creates - before == 1
    assert first.resource_id == second.resource_id


def test_wait_for_first_consumer_reports_prefetching_with_that_reason_until_consumed(
        aws, k8s, tenant):
    _req, msg = body(aws, tenant)
    runner = make_runner(aws, k8s, storage_class="wffc-rox")
    out = runner.handle(msg)
    assert out.state == "prefetching"
    assert out.reason.startswith("waiting_for_first_consumer")
    [eff] = aws.container.cache.effective(tenant, DIGEST, "kubernetes", LOCATION)
    assert eff.document()["state"] == "prefetching"
    k8s.dispatch("POST", f"/_emulator/consume/ml/{out.resource_id}", b"")
    assert runner.handle(json.dumps(json.loads(msg) | {"attempt": 2})).state == "present"


def test_a_read_write_once_only_claim_is_a_verification_failure(aws, k8s, tenant):
    req, msg = body(aws, tenant)
    t = Target.of(tenant, req.id, DIGEST, "kubernetes", LOCATION, "llama-snap")
    manifest = KubernetesRules().manifest(t, "10Gi", None)
    manifest["spec"]["accessModes"] = ["ReadWriteOnce"]
    k8s.add_pvc(manifest | {"status": {"phase": "Bound"}})
    out = make_runner(aws, k8s).handle(msg)
    assert out.state == "failed"
    assert out.reason == ("verification_failed: PVC access modes allow no multi-reader mount "
                          "(ReadWriteOnce only)")
    [eff] = aws.container.cache.effective(tenant, DIGEST, "kubernetes", LOCATION)
    assert eff.document()["state"] == "missing"


def test_a_snapshot_annotated_with_another_digest_fails_with_its_reason(aws, k8s, tenant):
    _, msg = body(aws, tenant, "other-snap")
    out = make_runner(aws, k8s).handle(msg)
    assert out.reason == "verification_failed: digest mismatch in volume snapshot annotation"


def test_release_deletes_only_the_claim_it_created(aws, k8s, tenant):
    req, msg = body(aws, tenant)
    runner = make_runner(aws, k8s)
    made = runner.handle(msg).resource_id
    assert made is not None
    k8s.add_pvc({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "team-claim", "namespace": "ml"},
                 "spec": {"accessModes": ["ReadOnlyMany"]}, "status": {"phase": "Bound"}})
    out = runner.handle(json.dumps(adapter_message(aws.container.prefetch.get(tenant, req.id),
                                                   "release")))
    assert out.deleted == [made]
    assert ("ml", made) not in k8s.pvcs
    assert ("ml", "team-claim") in k8s.pvcs


def test_objects_carry_an_increasing_resource_version(k8s):
    k8s.add_volume_snapshot("ml", "rv-a", {})
    k8s.add_volume_snapshot("ml", "rv-b", {})
    a = int(k8s.snapshots[("ml", "rv-a")]["metadata"]["resourceVersion"])
    b = int(k8s.snapshots[("ml", "rv-b")]["metadata"]["resourceVersion"])
    assert b > a


def test_a_forbidden_create_fails_the_request_and_reports_unknown(aws, k8s, tenant):
    req, msg = body(aws, tenant)
    k8s.fail_next("POST", r"/persistentvolumeclaims$", 403, "Forbidden")
    out = make_runner(aws, k8s).handle(msg)
    assert out.state == "failed"
    assert out.reason.endswith(": Forbidden")
    assert aws.container.prefetch.get(tenant, req.id).status == "failed"
    [eff] = aws.container.cache.effective(tenant, DIGEST, "kubernetes", LOCATION)
    assert eff.document()["state"] == "unknown"


def config_runner(aws: Any, clients: ClusterClients) -> Any:
    return adapter_runner(aws.container, KubernetesPvcAdapter(clients), KubernetesRules(),
                          aws.settings.adapter_kubernetes_queue_url)


def test_a_missing_kubeconfig_fails_the_request_with_its_reason_instead_of_retrying(aws, tenant):
    clients = ClusterClients(auth="kubeconfig", secrets=aws.client("secretsmanager"),
                             secret_prefix=f"absent-{tenant}")
    req, msg = body(aws, tenant)
    out = config_runner(aws, clients).handle(msg)  # returns: the SQS record is acknowledged
    assert out.state == "failed"
    done = aws.container.prefetch.get(tenant, req.id)
    assert done.status == "failed"
    assert done.failure_reason == "permission_config_clusterconfigerror"


def test_a_kubeconfig_that_does_not_load_is_permanent_too(aws, tenant):
    sm = aws.client("secretsmanager")
    prefix = f"broken-{tenant}"
    sm.create_secret(Name=f"{prefix}/kubeconfigs/prod", SecretString="clusters: [not, a, config")
    req, msg = body(aws, tenant)
    out = config_runner(aws, ClusterClients(auth="kubeconfig", secrets=sm,
                                            secret_prefix=prefix)).handle(msg)
    assert out.state == "failed"
    assert aws.container.prefetch.get(tenant, req.id).status == "failed"


def test_a_throttled_secret_read_is_retried_through_the_queue(aws, tenant):
    from botocore.exceptions import ClientError

    from infercrane.errors import DependencyUnavailable

    class Throttled:
        def get_secret_value(self, **_: Any) -> Any:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "GetSecretValue")

    req, msg = body(aws, tenant)
    with pytest.raises(DependencyUnavailable):
        config_runner(aws, ClusterClients(auth="kubeconfig", secrets=Throttled())).handle(msg)
    assert aws.container.prefetch.get(tenant, req.id).status == "in_progress"
