"""Capacity intelligence on DynamoDB (moto): keys, idempotency, rollups, reports, handlers."""

from __future__ import annotations

import copy
import importlib.util
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from infercrane.domain import capacity_synth
from infercrane.domain.capacity import CapacityService
from tests.conftest import REPO, load_event
from tests.unit.test_capacity import assert_matches_truth

END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=5)
CONTEXT = SimpleNamespace(function_name="fn", memory_limit_in_mb=512, aws_request_id="req-1",
                          invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:fn")


def handler(name: str):
    spec = importlib.util.spec_from_file_location(f"_test_cap_{name}",
                                                  REPO / "functions" / name / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


def load(svc, tenant, items):
    for batch in capacity_synth.batches(items):
        result = svc.ingest(tenant, batch, NOW)
        assert result.rejected == 0, result.errors[:3]


@pytest.fixture
def svc(aws):
    return CapacityService(aws.container.capacity_store)


def raw_items(aws):
    ddb = aws.client("dynamodb")
    table = aws.settings.capacity_table
    items, start = [], None
    while True:  # a test may Scan to check a property of every key; the service never does
        page = ddb.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        items += page["Items"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def test_ground_truth_and_a_ten_times_larger_set_reads_no_more_rollup_items(aws, svc):
    # moto answers a GSI Query by walking the whole table, so this tier stays small (24 hours);
    # the 720-hour, 10k/100k figures come from bench/capacity_scale.py and the unit tier.
    small = capacity_synth.generate(60, seed=21, end=END, id_prefix="s", hours=24)
    large = capacity_synth.generate(600, seed=22, end=END, id_prefix="l", hours=24)
    load(svc, "small", small.attempts)
    load(svc, "large", large.attempts)
    result = svc.aggregate(NOW)
    assert (result.hours, result.attempts, result.still_dirty) == (48, 660, 0)
    reads = {}
    for tenant, synth in (("small", small), ("large", large)):
        report = svc.report(tenant, "720h", END, None, NOW)
        assert_matches_truth(report, synth)
        assert report["read"]["tail_attempts"] == 0
        reads[tenant] = report["read"]["rollup_items"]
    assert reads["large"] <= reads["small"] == 1  # the closed day's one day rollup


def test_reports_fold_late_arrivals_and_ignore_other_tenants(aws, svc):
    synth = capacity_synth.generate(100, seed=4, end=END, hours=12)
    load(svc, "acme", synth.attempts)
    svc.aggregate(NOW)
    alone = svc.report("acme", "720h", END, "adapter,gpu", NOW)
    other = copy.deepcopy(synth.attempts)  # same attempt ids, another tenant
    load(svc, "globex", other[:300])
    assert svc.report("acme", "720h", END, "adapter,gpu", NOW) == alone
    late = copy.deepcopy(synth.attempts[0]) | {"attempt_id": "late-1"}
    assert svc.ingest("acme", [late], NOW).new == 1
    tail = svc.report("acme", "720h", END, "adapter,gpu", NOW)
    assert tail["read"]["tail_hours"] == 1
    assert sum(g["samples"] for g in tail["groups"]) == 101
    svc.aggregate(NOW)
    rolled = svc.report("acme", "720h", END, "adapter,gpu", NOW)
    assert rolled["groups"] == tail["groups"]
    assert rolled["read"]["tail_hours"] == 0


def test_every_key_begins_with_the_tenant_and_attempts_keep_raw_signals(aws, svc):
    synth = capacity_synth.generate(50, seed=8, end=END, hours=24)
    load(svc, "acme", synth.attempts)
    load(svc, "acme", synth.attempts)  # re-sent: nothing new
    svc.aggregate(NOW)
    items = raw_items(aws)
    attempts = [i for i in items if i["kind"]["S"] == "attempt"]
    assert len(attempts) == 50
    for item in items:
        assert item["pk"]["S"].startswith("acme#")
    failed = [i for i in attempts if i["outcome"]["S"] == "failed"]
    assert failed
    for item in failed:
        assert "error_message" in item
        assert item["classifier_version"]["S"]
        assert "failure_class" in item
    # sparse work list: nothing dirty is left once rolled up
    assert not [i for i in items if i["kind"]["S"] == "dirty"]


def test_a_large_hour_spills_over_several_rollup_items(aws, svc, monkeypatch):
    from infercrane.adapters.dynamo import capacity as adapter

    monkeypatch.setattr(adapter, "MAX_PART_BYTES", 600)
    synth = capacity_synth.generate(200, seed=6, end=END, hours=1)
    for a in synth.attempts:
        a["started_at"] = "2026-11-28T10:30:00.000Z"
        a["finished_at"] = "2026-11-28T10:40:00.000Z"
    load(svc, "acme", synth.attempts)
    svc.aggregate(NOW)
    report = svc.report("acme", "720h", END, None, NOW)
    assert report["read"]["rollup_items"] > 1
    assert sum(g["samples"] for g in report["groups"]) == 200
    monkeypatch.setattr(adapter, "MAX_PART_BYTES", 10**6)
    aws.container.capacity_store.mark_dirty("acme", [report_hour(report)], 0)
    svc.aggregate(NOW)
    again = svc.report("acme", "720h", END, None, NOW)
    assert again["read"]["rollup_items"] == 1  # the extra parts were deleted
    assert again["groups"] == report["groups"]


def report_hour(report):
    from infercrane.domain.capacity import hour_of

    return hour_of(int(datetime(2026, 11, 28, 10, tzinfo=UTC).timestamp() * 1000))


def test_lifecycle_function_ingests_the_control_plane_event_for_the_named_tenant(aws):
    aws.container.tenancy.create_tenant("acme", datetime.now(UTC))
    event = load_event("lifecycle_eventbridge.json")
    result = handler("lifecycle")(event, CONTEXT)
    assert (result["accepted"], result["rejected"], result["dropped"]) == (2, 0, 0)
    again = handler("lifecycle")(event, CONTEXT)
    assert again["accepted"] == 2
    report = aws.container.capacity.report("acme", "24h", datetime(2026, 11, 29, 21, tzinfo=UTC),
                                           None, datetime(2026, 11, 29, 21, tzinfo=UTC))
    assert sum(g["samples"] for g in report["groups"]) == 2
    assert sum(g["failures"]["capacity"] for g in report["groups"]) == 1


def test_lifecycle_function_drops_events_for_unknown_tenants(aws):
    event = load_event("lifecycle_eventbridge.json")
    event["detail"]["tenant"] = "nobody"
    assert handler("lifecycle")(event, CONTEXT)["dropped"] == 1
    assert [i for i in raw_items(aws) if i["kind"]["S"] == "attempt"] == []


def test_lifecycle_function_drops_an_event_without_a_detail(aws):
    # The handler hands the domain only the detail: the rest of EventBridge's envelope never
    # names a tenant or holds attempts.
    aws.container.tenancy.create_tenant("acme", datetime.now(UTC))
    event = load_event("lifecycle_eventbridge.json")
    event["tenant"], event["items"] = "acme", event.pop("detail")["items"]
    result = handler("lifecycle")(event, CONTEXT)
    assert (result["dropped"], result["reason"]) == (1, "unknown_tenant")
    assert [i for i in raw_items(aws) if i["kind"]["S"] == "attempt"] == []


def test_aggregate_function_rolls_up_from_the_schedule_event(aws):
    aws.container.capacity.ingest("acme", capacity_synth.generate(30, seed=3, end=END).attempts, NOW)
    result = handler("aggregate")(load_event("aggregate_schedule.json"), CONTEXT)
    assert result["attempts"] == 30
    assert result["hours"] == 30


def api_event(method, path, tenant, body=None, query=None):
    event = load_event("api_openapi.json")
    event.update({"resource": path, "path": path, "httpMethod": method,
                  "queryStringParameters": query,
                  "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()}
                  or None,
                  "body": None if body is None else (body if isinstance(body, str) else json.dumps(body)),
                  "headers": {"Content-Type": "application/json"},
                  "multiValueHeaders": {"Content-Type": ["application/json"]}})
    event["requestContext"] = {**event["requestContext"], "resourcePath": path,
                               "httpMethod": method, "authorizer": {"tenant": tenant}}
    return event


def test_api_routes_batch_semantics_and_report(aws):
    api = handler("api")
    good = capacity_synth.generate(3, seed=1, end=END).attempts
    bad = dict(good[0], attempt_id="bad-1", outcome="maybe")
    response = api(api_event("POST", "/v1/lifecycle-attempts", "acme", {"items": [*good, bad]}),
                   CONTEXT)
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert (body["accepted"], body["rejected"]) == (3, 1)
    assert body["errors"] == [{"index": 3, "field": "outcome", "code": "invalid_format",
                               "message": "Is not one of the allowed values."}]
    for payload, status in (("{nope", 400), ({"attempts": []}, 422), ([1], 422),
                            ({"items": [good[0]] * 501}, 413)):
        answer = api(api_event("POST", "/v1/lifecycle-attempts", "acme", payload), CONTEXT)
        assert answer["statusCode"] == status, payload
        assert "error" in json.loads(answer["body"])
    until = END.strftime("%Y-%m-%dT%H:%M:%SZ")
    report = api(api_event("GET", "/v1/capacity", "acme",
                           query={"window": "720h", "until": until, "group_by": "adapter"}), CONTEXT)
    doc = json.loads(report["body"])
    assert doc["scope"] == "tenant-observed"
    assert sum(g["samples"] for g in doc["groups"]) == 3
    other = json.loads(api(api_event("GET", "/v1/capacity", "globex",
                                     query={"window": "720h", "until": until}), CONTEXT)["body"])
    assert other["groups"] == []
    wrong = api(api_event("GET", "/v1/capacity", "acme", query={"window": "90m"}), CONTEXT)
    assert wrong["statusCode"] == 422
    assert json.loads(wrong["body"])["error"]["field"] == "window"


def test_an_open_day_waits_on_rolled_marks_and_is_compacted_into_a_day_item(aws, svc):
    store = aws.container.capacity_store
    now = END + timedelta(hours=10)
    synth = capacity_synth.generate(150, seed=12, end=END + timedelta(hours=6), hours=3)
    for batch in capacity_synth.batches(synth.attempts):
        assert svc.ingest("acme", batch, now).rejected == 0
    result = svc.aggregate(now)
    assert (result.awaiting_day_close, result.days, result.still_dirty) == (3, 0, 0)
    marks = store.dirty_hours("acme", 0, 10**7)
    assert [m.rolled for m in marks] == [True, True, True]
    store.mark_dirty("acme", [marks[0].hour], now_ms=1)  # a new attempt's mark...
    assert store.reschedule(marks[0], 10**13) is False  # ...is never rescheduled away
    assert not store.dirty_hours("acme", 0, 10**7)[0].rolled
    later = END + timedelta(days=1, minutes=10)
    assert svc.aggregate(later).days == 1
    assert not store.dirty_hours("acme", 0, 10**7)
    assert [i["sk"]["S"] for i in raw_items(aws) if i["kind"]["S"] == "day"] == ["2026-11-29#000"]
    report = svc.report("acme", "720h", END + timedelta(days=1), None, later)
    assert report["read"]["day_items"] == 1
    assert_matches_truth(report, synth)


def test_an_attempt_the_store_refuses_is_the_callers_422_not_an_outage(aws):
    # The net under validation (a message is at most 4,096 characters): an attempt DynamoDB
    # refuses (here an item over 400 KB) fails the same way at every retry, so it is the
    # caller's `unstorable_content`, as in every other store, never a 503 clients retry.
    from infercrane.domain.capacity import StoredAttempt
    from infercrane.errors import InvalidInput
    from infercrane.http.errors import status_for

    ms = int(NOW.timestamp() * 1000)
    oversized = StoredAttempt(
        tenant="acme", attempt_id="att-oversized", deployment="dep", operation="create",
        adapter="aws", runtime="vllm", compute_mode="dedicated", region="us-east-1", zone=None,
        gpu="h100", gpu_count=1, started_at_ms=ms, finished_at_ms=ms + 1000, outcome="failed",
        error_code="InsufficientInstanceCapacity", error_message="z" * 500_000,
        received_at_ms=ms, failure_class="capacity", persistent=False, rule=None,
        classifier_version="1")
    with pytest.raises(InvalidInput) as refused:
        aws.container.capacity_store.put_attempts([oversized])
    assert refused.value.code == "unstorable_content"
    assert status_for(refused.value) == 422


def test_a_batch_with_one_refused_attempt_still_marks_the_hours_of_the_stored_ones(
        aws, svc, monkeypatch):
    # The store writes the attempts it can and then raises 422 for the one it refused: the hours
    # of those written must still be marked, or they would never be rolled up (a retry is
    # refused the same way before it marks anything).
    from infercrane.errors import InvalidInput

    store = aws.container.capacity_store
    real = store.put_attempts

    def refuses_the_last(attempts):
        real(attempts[:-1])
        raise InvalidInput("The store cannot hold this content.", code="unstorable_content")

    monkeypatch.setattr(store, "put_attempts", refuses_the_last)
    items = capacity_synth.generate(5, seed=11, end=NOW).attempts
    with pytest.raises(InvalidInput):
        svc.ingest("acme", items, NOW)
    hours = {int(datetime.fromisoformat(i["started_at"].replace("Z", "+00:00")).timestamp()) // 3600
             for i in items}
    marked = {m.hour for m in store.dirty_hours("acme", min(hours), max(hours) + 1)}
    assert hours <= marked
