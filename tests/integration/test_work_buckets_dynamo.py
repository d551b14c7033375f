"""The work buckets in DirectoryTable (moto): each charge atomic, none lost or doubled under races."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from infercrane.adapters.dynamo.work import DynamoWorkBuckets
from infercrane.domain.work import WorkMeter
from infercrane.errors import RateLimited

NOW = 1_800_000_000_000


def stored_tat(aws, tenant):
    item = aws.client("dynamodb").get_item(
        TableName=aws.settings.directory_table, ConsistentRead=True,
        Key={"pk": {"S": f"WORK#{tenant}"}, "sk": {"S": "WORK"}}).get("Item")
    return None if item is None else int(item["tat"]["N"])


def test_idle_then_busy_then_over_the_limit(aws):
    buckets = DynamoWorkBuckets(aws.client("dynamodb"), aws.settings.directory_table)
    latest = NOW + 1000
    assert buckets.advance("acme", now_ms=NOW, cost_ms=400, latest_ms=latest,
                           known_ms=0) == (True, NOW + 400)  # no item yet: idle
    # A stale hint (idle) on a busy bucket: the failed write names the state, the next one charges.
    assert buckets.advance("acme", now_ms=NOW, cost_ms=400, latest_ms=latest,
                           known_ms=0) == (True, NOW + 800)
    assert buckets.advance("acme", now_ms=NOW, cost_ms=400, latest_ms=latest,
                           known_ms=NOW + 800) == (False, NOW + 800)  # 1200 > 1000: refused
    assert stored_tat(aws, "acme") == NOW + 800  # a refusal changes nothing
    later = NOW + 5000  # the bucket drained: idle again, from now
    assert buckets.advance("acme", now_ms=later, cost_ms=400, latest_ms=later + 1000,
                           known_ms=NOW + 800) == (True, later + 400)
    assert stored_tat(aws, "other") is None  # one item per tenant, only the charged ones


def test_concurrent_charges_take_exactly_what_the_burst_holds(aws):
    buckets = DynamoWorkBuckets(aws.client("dynamodb"), aws.settings.directory_table)

    def charge(_):
        return buckets.advance("race", now_ms=NOW, cost_ms=100, latest_ms=NOW + 1000, known_ms=0)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(charge, range(40)))
    passed = [tat for ok, tat in results if ok]
    # Ten of 100 ms fit in 1000 ms. A lost update would pass more, a double charge fewer; three
    # raced writes in a row may refuse one that would have fitted (never pass one that did not).
    assert 1 <= len(passed) <= 10
    assert stored_tat(aws, "race") == NOW + 100 * len(passed)
    assert sorted(passed) == [NOW + 100 * (i + 1) for i in range(len(passed))]  # none twice


def test_the_meter_on_dynamodb_refuses_a_flooding_tenant_with_retry_after(aws):
    meter = WorkMeter(DynamoWorkBuckets(aws.client("dynamodb"), aws.settings.directory_table),
                      rate_kib_s=100, burst_kib=300)
    meter.charge("flood", 150 * 1024)
    meter.charge("flood", 150 * 1024)
    with pytest.raises(RateLimited) as refused:
        meter.charge("flood", 150 * 1024)
    assert 1 <= refused.value.retry_after_s <= 2
    meter.charge("victim", 150 * 1024)
    assert aws.container.work_meter is not None  # the template sets the api function's rate
