"""The provider qualification's one generic scenario, driven through the real adapters and rules
(the real run needs credentials): AWS against moto's EC2, GCP against the GCE emulator,
Kubernetes against the API-server emulator reached through a kubeconfig. It lists planned and
leftover resources first, verifies the source, times prefetch-to-present, checks the read-only
plan, deletes only what the rules call ours, and counts provider failures by capacity class.
Without a configured target it skips in one line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from infercrane.cli.qualify import run_providers
from infercrane.domain.providers.aws import REQUEST_TAG
from infercrane.domain.providers.kubernetes import DIGEST_ANNOTATION
from infercrane.domain.providers.model import ProviderCallFailed, binding
from infercrane.qualify import providers
from tests.emulators.gce import GceEmulator
from tests.emulators.kubernetes import KubernetesEmulator

MODEL = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
FAST = {"INFERCRANE_QUALIFY_WAIT_S": "5", "INFERCRANE_QUALIFY_POLL_S": "0.01"}


class FaultingAdapter:
    """Wraps a real adapter. Fault injection lives here, on the test side: `fail_create` is
    raised by the next `create`; `keep` makes `delete` do nothing (a run that crashed before
    cleaning up)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.provider = inner.provider
        self.fail_create: Exception | None = None
        self.keep = False
        self.creates = 0
        self.deletes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, target: Any, source: dict[str, Any]) -> dict[str, Any]:
        self.creates += 1
        if self.fail_create is not None:
            exc, self.fail_create = self.fail_create, None
            raise exc
        return dict(self.inner.create(target, source))

    def delete(self, target: Any, resource_id: str) -> None:
        self.deletes.append(resource_id)
        if not self.keep:
            self.inner.delete(target, resource_id)


@dataclass
class Cloud:
    """One provider's fake cloud: the env that configures qualification for it, and the test's
    own view of what exists there."""

    provider: str
    env: dict[str, str]
    inventory: Callable[[], list[str]]  # resources made for qualification tenants
    seed_foreign: Callable[[], str]  # a resource qualification did not make
    exists: Callable[[str], bool]

    def target(self, repeats: int = 3, **env: str) -> providers.ProviderTarget:
        return providers.configured({**self.env, **FAST,
                                     "INFERCRANE_QUALIFY_REPEATS": str(repeats), **env})[self.provider]


def aws_cloud(ec2: Any, digest: str = MODEL) -> Cloud:
    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1, Encrypted=True)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol, Description=f"weights {binding(digest)}")["SnapshotId"]

    def inventory() -> list[str]:
        return sorted(v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]
                      if v["State"] not in ("deleting", "deleted")
                      and any(t["Key"] == REQUEST_TAG and t["Value"].startswith("qualify-")
                              for t in v.get("Tags") or []))

    def foreign() -> str:
        return str(ec2.create_volume(AvailabilityZone="us-east-1a", Size=1,
                                     SnapshotId=snap)["VolumeId"])

    def exists(vid: str) -> bool:
        return any(v["VolumeId"] == vid for v in ec2.describe_volumes()["Volumes"])

    return Cloud("aws", {"INFERCRANE_QUALIFY_MODEL": MODEL, "INFERCRANE_QUALIFY_AWS_SNAPSHOT": snap,
                         "INFERCRANE_QUALIFY_AWS_AZ": "us-east-1a"}, inventory, foreign, exists)


def gcp_cloud(gce: GceEmulator) -> Cloud:
    gce.add_snapshot("models", "llama", f"llama weights {binding(MODEL)}")
    gce.add_snapshot("models", "other", binding(OTHER))

    def foreign() -> str:
        gce.add_disk("infer", "us-central1-a", {"name": "someone-elses", "description": binding(MODEL)})
        return "someone-elses"

    return Cloud("gcp", {"INFERCRANE_QUALIFY_MODEL": MODEL, "INFERCRANE_QUALIFY_GCP_PROJECT": "infer",
                         "INFERCRANE_QUALIFY_GCP_ZONE": "us-central1-a",
                         "INFERCRANE_QUALIFY_GCP_SNAPSHOT": "projects/models/global/snapshots/llama",
                         "INFERCRANE_QUALIFY_GCP_ENDPOINT": gce.endpoint},
                 lambda: sorted(n for (_, _, n) in gce.disks if n.startswith("icm-")), foreign,
                 lambda name: any(n == name for (_, _, n) in gce.disks))


def kubernetes_cloud(k8s: KubernetesEmulator, tmp_path: Path) -> Cloud:
    k8s.add_volume_snapshot("ml", "llama-snap", {DIGEST_ANNOTATION: MODEL})
    k8s.add_volume_snapshot("ml", "other-snap", {DIGEST_ANNOTATION: OTHER})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({  # JSON is YAML: a kubeconfig the client loads as is
        "apiVersion": "v1", "kind": "Config", "current-context": "emu",
        "clusters": [{"name": "emu", "cluster": {"server": k8s.endpoint}}],
        "users": [{"name": "emu", "user": {}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}]}))

    def foreign() -> str:
        k8s.add_pvc({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "someone-elses", "namespace": "ml"},
                     "spec": {"accessModes": ["ReadOnlyMany"]}, "status": {"phase": "Bound"}})
        return "someone-elses"

    return Cloud("kubernetes", {"INFERCRANE_QUALIFY_MODEL": MODEL,
                                "INFERCRANE_QUALIFY_KUBECONFIG": str(kubeconfig),
                                "INFERCRANE_QUALIFY_K8S_NAMESPACE": "ml",
                                "INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT": "llama-snap"},
                 lambda: sorted(n for (_, n) in k8s.pvcs if n.startswith("icm-")), foreign,
                 lambda name: ("ml", name) in k8s.pvcs)


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


@pytest.fixture
def gce() -> Iterator[GceEmulator]:
    emulator = GceEmulator()
    emulator.start()
    yield emulator
    emulator.stop()


@pytest.fixture
def k8s() -> Iterator[KubernetesEmulator]:
    emulator = KubernetesEmulator()
    emulator.start()
    yield emulator
    emulator.stop()


@pytest.fixture(params=["aws", "gcp", "kubernetes"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path) -> Cloud:
    if request.param == "aws":
        return aws_cloud(request.getfixturevalue("ec2"))
    if request.param == "gcp":
        return gcp_cloud(request.getfixturevalue("gce"))
    return kubernetes_cloud(request.getfixturevalue("k8s"), tmp_path)


def scenario(pt: providers.ProviderTarget, journal: Path, lines: list[str],
             cleanup_wait_s: float = 5.0) -> tuple[providers.Scenario, FaultingAdapter]:
    adapter, rules = providers.build(pt)  # the production constructors
    wrapped = FaultingAdapter(adapter)
    return providers.Scenario(wrapped, rules, providers.Journal(journal), wait_s=5, poll_s=0.01,
                              cleanup_wait_s=cleanup_wait_s, echo=lines.append), wrapped


def test_scenario_reaches_present_checks_the_read_only_plan_and_leaves_nothing(cloud, tmp_path):
    lines: list[str] = []
    journal = tmp_path / "journal.json"
    run, adapter = scenario(cloud.target(repeats=3), journal, lines)
    result = run.run(cloud.target(repeats=3), dry_run=False)
    assert result.ok, result.failures()
    timing = result.facts["prefetch_to_present_s"]
    assert timing["n"] == 3 and len(timing["values"]) == 3
    assert all(v >= 0 for v in timing["values"]) and timing["p50"] <= timing["p95"]
    assert result.facts["outcomes"] == {"present": 3}
    assert {c.name for c in result.checks if c.passed} >= {
        "source verified by the provider rules",
        "every present resource has a read-only attach/mount plan",
        "nothing the run created is left"}
    assert adapter.creates == 3 and len(adapter.deletes) == 3
    assert cloud.inventory() == []
    assert json.loads(journal.read_text())["resources"] == []


def test_dry_run_lists_the_plan_and_creates_nothing(cloud, tmp_path):
    lines: list[str] = []
    run, adapter = scenario(cloud.target(repeats=2), tmp_path / "journal.json", lines)
    result = run.run(cloud.target(repeats=2), dry_run=True, run_id="qdry")
    assert result.ok and result.tried == "dry run only"
    planned = cloud.target(repeats=2).targets("qdry")
    assert all(t.name in lines[0] for t in planned)
    assert adapter.creates == 0 and adapter.deletes == []
    assert cloud.inventory() == []


CAPACITY_FAULTS = {
    # EBS volume quota reached: a quota hit, never a stock-out.
    "aws": ("quota", ProviderCallFailed("aws", "VolumeLimitExceeded",
                                        "You have exceeded your maximum gp3 storage limit")),
    # A PD CSI provisioner answering for an exhausted zone.
    "kubernetes": ("capacity", ProviderCallFailed(
        "kubernetes", "ProvisioningFailed", "rpc error: code = ResourceExhausted desc = The zone "
        "'projects/p/zones/us-central1-a' does not have enough resources available to fulfill "
        "the request.")),
}


def test_a_capacity_or_quota_error_is_counted_under_its_class(cloud, tmp_path, request):
    lines: list[str] = []
    pt = cloud.target(repeats=3)
    run, adapter = scenario(pt, tmp_path / "journal.json", lines)
    if cloud.provider == "gcp":
        # Through the real HTTP path: GCE answers the insert with its zone-exhausted reason.
        request.getfixturevalue("gce").fail_next("POST", r"/disks$", 403,
                                                 "ZONE_RESOURCE_POOL_EXHAUSTED")
        expected, code = "capacity", "ZONE_RESOURCE_POOL_EXHAUSTED"
    else:
        expected, adapter.fail_create = CAPACITY_FAULTS[cloud.provider]
        code = adapter.fail_create.provider_code
    result = run.run(pt, dry_run=False)
    assert result.facts["outcomes"] == {"present": 2, expected: 1}
    assert result.facts["codes"] == {expected: {code: 1}}
    assert result.facts["prefetch_to_present_s"]["n"] == 2
    assert result.ok, result.failures()  # a stock-out is a measurement, not a broken promise
    assert cloud.inventory() == []


def test_leftovers_of_a_crashed_run_are_listed_first_then_removed_and_foreign_ones_kept(
        cloud, tmp_path):
    journal = tmp_path / "journal.json"
    foreign = cloud.seed_foreign()
    lines: list[str] = []
    crashed, adapter = scenario(cloud.target(repeats=2), journal, lines, cleanup_wait_s=0.05)
    adapter.keep = True  # the earlier run never got to delete
    first = crashed.run(cloud.target(repeats=2), dry_run=False, run_id="qold")
    assert [c.name for c in first.failures()] == ["nothing the run created is left"]
    left = cloud.inventory()
    assert len(left) == 2

    dry, dry_adapter = scenario(cloud.target(repeats=1), journal, lines)
    dry.run(cloud.target(repeats=1), dry_run=True)
    assert all(rid in lines[-1] for rid in left)
    assert foreign not in lines[-1]
    assert cloud.inventory() == left and dry_adapter.deletes == []

    again, _ = scenario(cloud.target(repeats=1), journal, lines)
    result = again.run(cloud.target(repeats=1), dry_run=False)
    assert result.ok, result.failures()
    assert cloud.inventory() == []
    assert json.loads(journal.read_text())["resources"] == []
    assert cloud.exists(foreign)  # never in the journal, never touched


class BrokenRules:
    """Wraps the real rules, breaking one promise from the test side."""

    def __init__(self, inner: Any, *, writable_plan: bool = False, disown: bool = False):
        self.inner, self.provider = inner, inner.provider
        self.writable_plan, self.disown = writable_plan, disown

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def owned(self, resource: dict[str, Any], target: Any) -> bool:
        return False if self.disown else bool(self.inner.owned(resource, target))

    def plan(self, resource: dict[str, Any], target: Any) -> dict[str, Any]:
        plan = self.inner.plan(resource, target)
        return _writable(plan) if self.writable_plan else dict(plan)


def _writable(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (False if k == "readOnly" else "READ_WRITE" if k == "mode"
                    else ["rw"] if k == "options" else _writable(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_writable(v) for v in node]
    return node


def test_a_writable_attach_plan_fails_its_check(cloud, tmp_path):
    pt = cloud.target(repeats=1)
    run, _ = scenario(pt, tmp_path / "journal.json", [])
    run.rules = BrokenRules(run.rules, writable_plan=True)
    result = run.run(pt, dry_run=False)
    assert [c.name for c in result.failures()] == [
        "every present resource has a read-only attach/mount plan"]
    assert cloud.inventory() == []


def test_a_resource_the_rules_do_not_call_ours_is_never_deleted(cloud, tmp_path):
    pt = cloud.target(repeats=2)
    run, adapter = scenario(pt, tmp_path / "journal.json", [])
    run.rules = BrokenRules(run.rules, disown=True)
    result = run.run(pt, dry_run=False)
    assert adapter.deletes == []
    assert len(cloud.inventory()) == 2
    assert {c.name for c in result.failures()} == {
        "the rules recognise every created resource as this prefetch's",
        "nothing the run created is left"}


def test_a_source_bound_to_another_model_fails_verification_and_creates_nothing(ec2, tmp_path):
    cloud = aws_cloud(ec2, digest=OTHER)
    lines: list[str] = []
    run, adapter = scenario(cloud.target(repeats=2), tmp_path / "journal.json", lines)
    result = run.run(cloud.target(repeats=2), dry_run=False)
    assert [c.name for c in result.failures()] == ["source verified by the provider rules"]
    assert "digest mismatch" in result.failures()[0].detail
    assert adapter.creates == 0


def test_provider_run_without_a_target_skips_in_one_line(capsys):
    assert run_providers(None, env={}) == 0
    assert capsys.readouterr().out.strip().splitlines() == [providers.NEEDS]


def test_a_target_without_credentials_is_skipped_with_what_it_needs(capsys, tmp_path):
    env = {"INFERCRANE_QUALIFY_MODEL": MODEL, "INFERCRANE_QUALIFY_KUBECONFIG": str(tmp_path / "none"),
           "INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT": "llama-snap"}
    assert run_providers(None, env=env) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines() == [providers.NEEDS]
    assert "kubernetes provider skipped: needs a readable kubeconfig" in captured.err


def test_provider_run_is_configured_only_by_a_complete_target():
    env = {"INFERCRANE_QUALIFY_MODEL": MODEL, "INFERCRANE_QUALIFY_AWS_SNAPSHOT": "snap-1"}
    assert providers.configured(env) == {}
    env["INFERCRANE_QUALIFY_AWS_AZ"] = "us-east-1a"
    assert providers.configured(env)["aws"].region == "us-east-1"
    env |= {"INFERCRANE_QUALIFY_GCP_PROJECT": "p", "INFERCRANE_QUALIFY_GCP_ZONE": "z",
            "INFERCRANE_QUALIFY_GCP_SNAPSHOT": "llama"}
    assert providers.configured(env)["gcp"].source == "projects/p/global/snapshots/llama"


def test_every_configured_provider_runs_and_writes_provider_qualification_evidence(
        ec2, gce, k8s, tmp_path, capsys):
    env = {**aws_cloud(ec2).env, **gcp_cloud(gce).env, **kubernetes_cloud(k8s, tmp_path).env,
           **FAST, "INFERCRANE_QUALIFY_REPEATS": "2",
           "INFERCRANE_QUALIFY_JOURNAL": str(tmp_path / "journal.json")}
    evidence = tmp_path / "evidence.json"
    assert run_providers(evidence, env=env) == 0, capsys.readouterr()
    doc = json.loads(evidence.read_text())
    assert doc["evidence_class"] == "provider-qualification" and doc["ok"]
    rows = {p["promise"]: p for p in doc["promises"]}
    assert set(rows) == {"aws cache and capacity", "gcp cache and capacity",
                         "kubernetes cache and capacity"}
    for row in rows.values():
        assert row["facts"]["prefetch_to_present_s"]["n"] == 2
        assert row["facts"]["outcomes"] == {"present": 2}
    assert gce.disks == {} or all(not n.startswith("icm-") for (_, _, n) in gce.disks)
    assert not [n for (_, n) in k8s.pvcs if n.startswith("icm-")]
