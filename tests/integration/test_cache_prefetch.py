"""The cache table, the prefetch flow and the sweeper against moto, wired as in Lambda."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from infercrane.domain.cache import CacheService, CacheSweeper
from infercrane.domain.prefetch import PrefetchService
from infercrane.errors import Conflict, DependencyUnavailable, IdempotencyConflict, NotFound
from tests.support.lambda_context import LambdaContext

DIGEST = "sha256:" + "ab" * 32
OTHER_DIGEST = "sha256:" + "cd" * 32
REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def load_handler(name: str) -> Any:
    path = REPO / "functions" / name / "app.py"
    spec = importlib.util.spec_from_file_location(f"_test_fn_{name}", path)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def drain(aws: Any, queue: str) -> list[dict[str, Any]]:
    sqs = aws.client("sqs")
    url = aws.physical.refs[queue]
    out: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                  VisibilityTimeout=60).get("Messages", [])
        if not got:
            return out
        for m in got:
            out.append(m)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def sqs_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Records": [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"],
                         "body": m["Body"], "attributes": {}, "messageAttributes": {},
                         "md5OfBody": "", "eventSource": "aws:sqs",
                         "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
                         "awsRegion": "us-east-1"} for m in messages]}


class FailingTransport:
    """The test's fault injection: a send that never reaches SQS (a crash before the send)."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, body: dict[str, Any]) -> str:
        self.calls += 1
        raise DependencyUnavailable("The queue is unavailable.")


def services(aws: Any, clock: Clock) -> tuple[CacheService, PrefetchService, CacheSweeper]:
    c = aws.container
    prefetch = PrefetchService(c.cache_store, c.prefetch_queue, c.adapter_transports, clock)
    return (CacheService(c.cache_store, clock), prefetch,
            CacheSweeper(c.cache_store, prefetch, clock))


def test_observation_round_trip_and_cross_tenant_isolation(aws: Any) -> None:
    clock = Clock(datetime(2026, 11, 29, 20, 0, tzinfo=UTC))
    cache, _, _ = services(aws, clock)
    cache.report("demo", DIGEST, "aws", "us-east-1a", "present", {"snapshot_id": "snap-1"},
                 clock.now, ttl_seconds=600)
    found = cache.effective("demo", DIGEST)
    assert [(e.adapter, e.location, e.state) for e in found] == [("aws", "us-east-1a", "present")]
    assert cache.effective("other", DIGEST) == []
    assert cache.effective("demo", OTHER_DIGEST) == []


def test_older_observation_never_replaces_a_newer_one(aws: Any) -> None:
    clock = Clock(datetime(2026, 11, 29, 20, 0, tzinfo=UTC))
    cache, _, _ = services(aws, clock)
    cache.report("demo", DIGEST, "gcp", "us-central1-a", "present", {"disk": "d1"}, clock.now)
    late = cache.report("demo", DIGEST, "gcp", "us-central1-a", "missing", {"disk": "d1"},
                        clock.now - timedelta(minutes=5))
    assert late.applied is False
    [only] = cache.effective("demo", DIGEST)
    assert only.state == "present"


def test_sweep_marks_expired_observation_unknown_with_audit(aws: Any) -> None:
    clock = Clock(datetime(2026, 11, 29, 20, 0, tzinfo=UTC))
    cache, _, sweeper = services(aws, clock)
    cache.report("demo", DIGEST, "kubernetes", "prod-eks/models", "present", {"pvc_uid": "u1"},
                 clock.now, ttl_seconds=60)
    assert sweeper.sweep(clock.now + timedelta(seconds=59)).observations_expired == 0
    result = sweeper.sweep(clock.now + timedelta(seconds=61))
    assert result.observations_expired == 1
    # Swept once: it has left the index, so the next sweep finds nothing.
    assert sweeper.sweep(clock.now + timedelta(seconds=120)).observations_expired == 0
    stored = aws.container.cache_store.list_observations("demo", DIGEST, None, None)
    assert [(o.state, o.previous_state) for o in stored] == [("unknown", "present")]
    events = [a["event"] for a in aws.container.cache_store.audit("demo", DIGEST)]
    assert sorted(events) == ["expired", "reported"]


def test_renewed_observation_is_not_expired_by_a_stale_sweep_entry(aws: Any) -> None:
    clock = Clock(datetime(2026, 11, 29, 20, 0, tzinfo=UTC))
    cache, _, sweeper = services(aws, clock)
    cache.report("demo", DIGEST, "aws", "us-east-1b", "present", {"snapshot_id": "s"},
                 clock.now, ttl_seconds=60)
    clock.now += timedelta(seconds=50)
    cache.report("demo", DIGEST, "aws", "us-east-1b", "present", {"snapshot_id": "s"},
                 clock.now, ttl_seconds=600)
    assert sweeper.sweep(clock.now + timedelta(seconds=30)).observations_expired == 0
    [only] = cache.effective("demo", DIGEST)
    assert only.observation.state == "present"


def test_identical_requests_share_one_request_and_one_message(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    first, created = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-0123")
    again, created_again = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-0123")
    assert (created, created_again) == (True, False)
    assert again.id == first.id
    assert len(drain(aws, "PrefetchQueue")) == 1
    with pytest.raises(IdempotencyConflict) as err:
        prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-other")
    assert err.value.field == "source"


def test_other_tenant_cannot_read_a_request(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "gcp", "us-central1-b", "projects/p/snap")
    assert prefetch.get("demo", req.id).id == req.id
    with pytest.raises(NotFound):
        prefetch.get("other", req.id)
    with pytest.raises(NotFound):
        prefetch.transition("other", req.id, "in_progress")


def test_ended_request_lets_a_new_attempt_start(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    first, _ = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-1")
    prefetch.transition("demo", first.id, "dispatched")
    prefetch.transition("demo", first.id, "in_progress")
    done = prefetch.transition("demo", first.id, "failed", reason="Snapshot not encrypted")
    assert done.failure_reason == "snapshot_not_encrypted"
    second, created = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-2")
    assert created
    assert second.attempt == 2
    assert second.id != first.id
    assert prefetch.get("demo", first.id).status == "failed"


def test_transitions_are_conditional_and_idempotent(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "kubernetes", "c1/ns", "volumesnapshot/ns/s1")
    prefetch.transition("demo", req.id, "in_progress")
    again = prefetch.transition("demo", req.id, "in_progress")
    assert again.status == "in_progress"
    with pytest.raises(Conflict):
        prefetch.transition("demo", req.id, "accepted")
    prefetch.transition("demo", req.id, "completed")
    with pytest.raises(Conflict):
        prefetch.transition("demo", req.id, "failed")


def test_record_resource_keeps_the_first_writer(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "aws", "us-east-1c", "snap-9")
    assert prefetch.record_resource("demo", req.id, "volume_id", "vol-1") == "vol-1"
    assert prefetch.record_resource("demo", req.id, "volume_id", "vol-2") == "vol-1"
    assert prefetch.get("demo", req.id).resources == {"volume_id": "vol-1"}


def test_dispatch_sends_the_contract_message_once(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "gcp", "europe-west4-b", "projects/p/snap")
    dispatch = load_handler("prefetch_dispatch")
    messages = drain(aws, "PrefetchQueue")
    # A duplicate delivery of the same queue message: the second sends nothing.
    for _ in range(2):
        result = dispatch.handler(sqs_event(messages), LambdaContext("dispatch"))
        assert result == {"batchItemFailures": []}
    sent = drain(aws, "AdapterGcpQueue")
    assert len(sent) == 1
    assert json.loads(sent[0]["Body"]) == {
        "schema": "infercrane.prefetch/v1", "action": "prefetch", "tenant": "demo",
        "request_id": req.id, "model": DIGEST, "adapter": "gcp", "location": "europe-west4-b",
        "source": "projects/p/snap", "attempt": 1}
    assert prefetch.get("demo", req.id).status == "dispatched"


def test_killed_dispatch_is_recovered_by_the_sweeper_exactly_once(aws: Any) -> None:
    past = Clock(datetime.now(UTC) - timedelta(hours=1))
    c = aws.container
    broken = PrefetchService(c.cache_store, FailingTransport(), c.adapter_transports, past)
    req, created = broken.request("demo", DIGEST, "aws", "us-west-2a", "snap-crash")
    assert created
    assert drain(aws, "PrefetchQueue") == []
    assert c.prefetch.get("demo", req.id).status == "accepted"

    sweep = load_handler("cache_sweep")
    assert sweep.handler({}, LambdaContext("sweep"))["requests_redispatched"] == 1
    dispatch = load_handler("prefetch_dispatch")
    dispatch.handler(sqs_event(drain(aws, "PrefetchQueue")), LambdaContext("dispatch"))
    # A second sweep right after finds nothing overdue.
    assert sweep.handler({}, LambdaContext("sweep"))["requests_redispatched"] == 0
    assert drain(aws, "PrefetchQueue") == []
    sent = drain(aws, "AdapterAwsQueue")
    assert [json.loads(m["Body"])["request_id"] for m in sent] == [req.id]
    assert c.prefetch.get("demo", req.id).status == "dispatched"


def test_release_sends_a_release_message_to_the_adapter(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "kubernetes", "c1/models", "vs/models/s")
    released = prefetch.request_release("demo", req.id)
    assert released.release_requested_at is not None
    [msg] = drain(aws, "AdapterKubernetesQueue")
    assert json.loads(msg["Body"])["action"] == "release"


def test_dispatch_event_file_for_an_unknown_request_is_acknowledged(aws: Any) -> None:
    from tests.conftest import load_event

    dispatch = load_handler("prefetch_dispatch")
    result = dispatch.handler(load_event("prefetch_dispatch_sqs.json"), LambdaContext("dispatch"))
    assert result == {"batchItemFailures": []}
    assert drain(aws, "AdapterAwsQueue") == []


def test_dispatch_reports_a_transient_send_failure_for_retry(aws: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(datetime.now(UTC))
    _, prefetch, _ = services(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-7")
    messages = drain(aws, "PrefetchQueue")
    monkeypatch.setitem(aws.container.adapter_transports, "aws", FailingTransport())
    dispatch = load_handler("prefetch_dispatch")
    # One record fails for now (retried by SQS), the other is done: a partial batch response.
    unknown = {"MessageId": "m-unknown", "ReceiptHandle": "r",
               "Body": json.dumps({"tenant": "demo", "request_id": "pf_" + "0" * 32 + "_1"})}
    result = dispatch.handler(sqs_event([*messages, unknown]), LambdaContext("dispatch"))
    assert result == {"batchItemFailures": [{"itemIdentifier": messages[0]["MessageId"]}]}
    assert aws.container.prefetch.get("demo", req.id).status == "accepted"


def test_sweep_event_file_runs_the_sweep(aws: Any) -> None:
    from tests.conftest import load_event

    clock = Clock(datetime.now(UTC) - timedelta(hours=2))
    cache, _, _ = services(aws, clock)
    cache.report("demo", DIGEST, "aws", "us-east-1a", "present", {"snapshot_id": "s"},
                 clock.now, ttl_seconds=60)
    sweep = load_handler("cache_sweep")
    result = sweep.handler(load_event("cache_sweep_schedule.json"), LambdaContext("sweep"))
    assert result["observations_expired"] == 1
    [obs] = aws.container.cache_store.list_observations("demo", DIGEST, None, None)
    assert obs.state == "unknown"
