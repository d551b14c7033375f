"""The adapter runner with fakes of its ports: idempotence under redelivery and races, re-checks,
failure reasons, and a release that removes only what this prefetch created."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from infercrane.domain.providers.gcp import PREFETCH_KEY_LABEL, GcpRules
from infercrane.domain.providers.message import AdapterMessage, Target
from infercrane.domain.providers.model import ProviderCallFailed, binding
from infercrane.domain.providers.runner import AdapterRunner, RunnerPolicy
from infercrane.errors import DependencyUnavailable, NotFound

DIGEST = "sha256:" + "ab" * 32
NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


def message(**over: Any) -> AdapterMessage:
    body = {"schema": "infercrane.prefetch/v1", "action": "prefetch", "tenant": "demo",
            "request_id": "pf_1", "model": DIGEST, "adapter": "gcp", "location": "us-central1-a",
            "source": "projects/m/global/snapshots/llama", "attempt": 1} | over
    return AdapterMessage.model_validate(body)


class FakeGce:
    """Provider-shaped disks in memory; `status_after_create` lets a disk stay RESTORING."""

    provider = "gcp"

    def __init__(self, source_description: str = binding(DIGEST)):
        self.source = {"status": "READY", "description": source_description}
        self.disks: dict[str, dict[str, Any]] = {}
        self.creates = 0
        self.deleted: list[str] = []
        self.status_after_create = "READY"
        self.fail_with: ProviderCallFailed | None = None

    def describe_source(self, t: Target) -> dict[str, Any] | None:
        if self.fail_with:
            raise self.fail_with
        return self.source

    def find(self, t: Target) -> dict[str, Any] | None:
        return self.disks.get(t.name)

    def _disk(self, t: Target, name: str) -> dict[str, Any]:
        return {"name": name, "status": self.status_after_create, "description": binding(t.model),
                "zone": f"zones/{t.location}", "labels": {PREFETCH_KEY_LABEL: t.key}}

    def create(self, t: Target, source: dict[str, Any]) -> dict[str, Any]:
        self.creates += 1
        self.disks.setdefault(t.name, self._disk(t, t.name))
        return self.disks[t.name]

    def describe(self, t: Target, rid: str) -> dict[str, Any] | None:
        return self.disks.get(rid)

    def delete(self, t: Target, rid: str) -> None:
        self.deleted.append(rid)
        self.disks.pop(rid, None)

    def facts(self, t: Target, r: dict[str, Any]) -> dict[str, str]:
        return {}


class FakePrefetch:
    def __init__(self) -> None:
        self.status = "dispatched"
        self.reason: str | None = None
        self.resources: dict[str, str] = {}
        self.transitions: list[str] = []
        self.exists = True

    def get(self, tenant: str, request_id: str) -> Any:
        if not self.exists:
            raise NotFound("No such prefetch request.", field="id")
        return SimpleNamespace(status=self.status, resources=dict(self.resources))

    def transition(self, tenant: str, request_id: str, to_status: str, *,
                   reason: str | None = None) -> None:
        self.transitions.append(to_status)
        self.status, self.reason = to_status, reason

    def record_resource(self, tenant: str, request_id: str, key: str, value: str) -> str:
        return self.resources.setdefault(key, value)


class FakeCache:
    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def report(self, tenant: str, model: str, adapter: str, location: str, state: str,
               evidence: dict[str, str], observed_at: datetime,
               ttl_seconds: int | None = None) -> None:
        self.reports.append({"state": state, "evidence": evidence, "ttl": ttl_seconds})


class FakeRechecks:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], int]] = []

    def schedule(self, body: Any, delay_s: int) -> None:
        self.sent.append((dict(body), delay_s))


def classify(provider: str, code: str | None, message: str | None) -> Any:
    table = {"RESOURCE_OPERATION_RATE_EXCEEDED": "transient", "IAM_PERMISSION_DENIED":
             "permission_config", "QUOTA_EXCEEDED": "quota"}
    return SimpleNamespace(failure_class=table.get(code or "", "unknown"))


@pytest.fixture
def world():
    gce, prefetch, cache, rechecks = FakeGce(), FakePrefetch(), FakeCache(), FakeRechecks()
    runner = AdapterRunner(gce, GcpRules(), prefetch, cache, classify, lambda: NOW, rechecks,
                           RunnerPolicy(recheck_delay_s=10, max_rechecks=3))
    return SimpleNamespace(gce=gce, prefetch=prefetch, cache=cache, rechecks=rechecks,
                           runner=runner)


def test_a_verified_prefetch_reports_present_with_a_read_only_plan(world):
    out = world.runner.run(message())
    assert out.state == "present"
    assert world.prefetch.transitions == ["in_progress", "completed"]
    last = world.cache.reports[-1]
    assert last["state"] == "present"
    assert json.loads(last["evidence"]["attach_plan"])["attachedDisks"][0]["mode"] == "READ_ONLY"


def test_redelivery_creates_no_second_resource(world):
    world.runner.run(message())
    world.prefetch.status = "in_progress"  # as if the first delivery crashed before completing
    world.runner.run(message())
    assert world.gce.creates == 1
    assert len(world.gce.disks) == 1


def test_a_lost_creation_race_deletes_only_its_own_duplicate(world):
    # Another delivery recorded its disk first; this delivery's create made a second one.
    world.gce.disks["winner"] = world.gce._disk(message().target(), "winner")
    world.prefetch.resources["resource_id"] = "winner"
    out = world.runner.run(message())
    assert out.deleted == [message().target().name]
    assert list(world.gce.disks) == ["winner"]
    assert out.resource_id == "winner"


def test_a_mismatched_digest_fails_the_request_with_a_precise_reason(world):
    world.gce.source["description"] = binding("sha256:" + "cd" * 32)
    out = world.runner.run(message())
    assert out.state == "failed"
    assert world.prefetch.reason == "verification_failed: digest mismatch in snapshot description"
    assert world.cache.reports[-1]["state"] == "missing"
    assert world.gce.creates == 0


def test_a_resource_still_restoring_is_rechecked_later_with_a_short_lived_observation(world):
    world.gce.status_after_create = "RESTORING"
    out = world.runner.run(message())
    assert out.state == "prefetching"
    body, delay = world.rechecks.sent[-1]
    assert body["attempt"] == 2
    assert delay == 10
    assert world.cache.reports[-1]["state"] == "prefetching"
    assert world.cache.reports[-1]["ttl"] is not None
    assert world.cache.reports[-1]["ttl"] < 3600
    assert world.prefetch.status == "in_progress"


def test_rechecks_back_off_and_give_up_with_a_timeout_reason(world):
    world.gce.status_after_create = "RESTORING"
    world.runner.run(message(attempt=2))
    assert world.rechecks.sent[-1][1] == 20
    out = world.runner.run(message(attempt=3))
    assert out.state == "failed"
    assert world.prefetch.reason.startswith("timeout: still prefetching")


def test_a_transient_provider_error_is_retried_through_the_queue(world):
    world.gce.fail_with = ProviderCallFailed("gcp", "RESOURCE_OPERATION_RATE_EXCEEDED", "slow")
    with pytest.raises(DependencyUnavailable):
        world.runner.run(message())
    assert world.prefetch.status == "in_progress"


def test_a_permission_error_fails_the_request_with_its_classified_reason(world):
    world.gce.fail_with = ProviderCallFailed("gcp", "IAM_PERMISSION_DENIED", "denied")
    out = world.runner.run(message())
    assert out.state == "failed"
    assert world.prefetch.reason == "permission_config: IAM_PERMISSION_DENIED"
    assert world.cache.reports[-1]["state"] == "unknown"


def test_a_finished_request_is_not_worked_again(world):
    world.prefetch.status = "completed"
    assert world.runner.run(message()).state == "skipped"
    assert world.gce.creates == 0
    assert world.cache.reports == []


def test_an_unknown_request_is_dropped_without_provider_calls(world):
    world.prefetch.exists = False
    assert world.runner.run(message()).state == "skipped"
    assert world.gce.creates == 0


def test_release_removes_what_this_prefetch_created(world):
    world.runner.run(message())
    out = world.runner.run(message(action="release"))
    assert out.state == "released"
    assert world.gce.disks == {}
    assert world.cache.reports[-1]["state"] == "missing"


def test_release_refuses_a_resource_it_did_not_create_and_tag(world):
    t = message().target()
    world.gce.disks[t.name] = world.gce._disk(t, t.name) | {"labels": {}}
    out = world.runner.run(message(action="release"))
    assert out.state == "skipped"
    assert t.name in world.gce.disks
    assert world.gce.deleted == []


@pytest.mark.parametrize("body", ["not json", '{"prompt": ' + "[" * 10_000 + "]" * 10_000 + "}",
                                  '{"schema": "infercrane.prefetch/v1", "prompt": "x"}'])
def test_a_body_that_is_not_a_message_is_consumed_not_retried(world, body):
    out = world.runner.handle(body)
    assert (out.action, out.state) == ("invalid", "skipped")
    assert world.gce.deleted == []


def test_a_message_for_another_adapter_is_consumed_not_retried(world):
    out = world.runner.handle(message(adapter="aws", location="us-east-1a").model_dump_json(
        by_alias=True))
    assert (out.action, out.state) == ("invalid", "skipped")
