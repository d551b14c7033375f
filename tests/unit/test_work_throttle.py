"""Throttling by work: tenants are charged per KiB of body, not per request (domain/work.py)."""

from __future__ import annotations

import json
import threading

import pytest

from infercrane.domain.work import WorkMeter
from infercrane.errors import RateLimited


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class MemoryBuckets:
    """The port's contract in memory: one atomic GCRA step per call, calls counted."""

    def __init__(self) -> None:
        self.tat: dict[str, int] = {}
        self.calls = 0
        self._lock = threading.Lock()

    def advance(self, tenant, *, now_ms, cost_ms, latest_ms, known_ms):
        with self._lock:
            self.calls += 1
            tat = max(self.tat.get(tenant, now_ms), now_ms)
            if tat + cost_ms > latest_ms:
                return False, self.tat.get(tenant, now_ms)
            self.tat[tenant] = tat + cost_ms
            return True, tat + cost_ms


def batch_body(items: int) -> int:
    """The bytes of a POST /v1/observations batch of `items` gateway observations."""
    item = {"observation_id": "o" * 20, "deployment": "chat", "arrival_ms": 1_764_000_000_000,
            "input_tokens": 1234, "output_tokens": 321, "latency_ms": 812,
            "session_id": "s" * 16, "prefix_block_ids": [f"b{i}" for i in range(8)]}
    return len(json.dumps({"items": [item] * items}))


def test_a_500_item_batch_costs_its_kib_where_a_small_request_costs_nothing():
    buckets, clock = MemoryBuckets(), Clock()
    meter = WorkMeter(buckets, rate_kib_s=100, burst_kib=1000, clock=clock)
    meter.charge("acme", 900)  # under 1 KiB: free, and no call to the store
    assert buckets.calls == 0
    size = batch_body(500)
    assert meter.units(size) == size // 1024 > 100  # one request, over a hundred units
    meter.charge("acme", size)
    assert buckets.calls == 1


def test_a_flood_of_batches_is_refused_with_the_seconds_until_it_fits_and_others_pass():
    buckets, clock = MemoryBuckets(), Clock()
    meter = WorkMeter(buckets, rate_kib_s=100, burst_kib=400, clock=clock)
    size = 150 * 1024
    meter.charge("flood", size)  # two batches at the same instant fill 300 of 400 KiB
    meter.charge("flood", size)
    with pytest.raises(RateLimited) as refused:
        meter.charge("flood", size)
    # 300 of 400 KiB used: the third needs 50 KiB more, i.e. 0.5 s at 100 KiB/s -> 1 s.
    assert refused.value.retry_after_s == 1
    assert refused.value.code == "rate_limited"
    meter.charge("victim", size)  # another tenant's bucket is its own
    clock.t += 0.5
    meter.charge("flood", size)  # it fits after the time it was told


def test_a_refusal_known_from_an_earlier_answer_asks_the_store_nothing():
    buckets, clock = MemoryBuckets(), Clock()
    meter = WorkMeter(buckets, rate_kib_s=10, burst_kib=100, clock=clock)
    meter.charge("flood", 100 * 1024)
    calls = buckets.calls
    for _ in range(50):
        with pytest.raises(RateLimited) as refused:
            meter.charge("flood", 100 * 1024)
    assert buckets.calls == calls  # the bucket's time only grows: certain without asking
    assert refused.value.retry_after_s == 10


def test_the_steady_rate_is_what_passes_over_time():
    buckets, clock = MemoryBuckets(), Clock()
    meter = WorkMeter(buckets, rate_kib_s=64, burst_kib=128, clock=clock)
    charged = 0
    for _ in range(1000):  # 10 s of 10 KiB bodies every 10 ms (1000 KiB/s offered)
        try:
            meter.charge("flood", 10 * 1024)
            charged += 10
        except RateLimited:
            pass
        clock.t += 0.01
    assert 128 + 64 * 10 - 10 <= charged <= 128 + 64 * 10


def test_a_body_larger_than_the_burst_empties_the_bucket_instead_of_never_passing():
    meter = WorkMeter(MemoryBuckets(), rate_kib_s=1, burst_kib=8, clock=Clock())
    meter.charge("acme", 10 * 1024 * 1024)
    with pytest.raises(RateLimited):
        meter.charge("acme", 2048)


def test_the_http_layer_answers_429_with_retry_after_in_the_envelope(monkeypatch):
    from infercrane.http import app as http_app

    class Container:
        work_meter = WorkMeter(MemoryBuckets(), rate_kib_s=1, burst_kib=2, clock=Clock())

    monkeypatch.setattr("infercrane.bootstrap.get_container", lambda: Container)
    event = {"httpMethod": "POST", "path": "/v1/observations", "resource": "/v1/observations",
             "headers": {"Content-Type": "application/json"},
             "requestContext": {"authorizer": {"tenant": "flood"}, "requestId": "r1"},
             "body": json.dumps({"items": ["x" * 2100]})}
    app = http_app.build_app([], title="t")
    first = app.resolve(event, None)  # type: ignore[arg-type]
    assert first["statusCode"] == 404  # charged, then routed (no route in this app)
    refused = app.resolve(event, None)  # type: ignore[arg-type]
    assert refused["statusCode"] == 429
    assert refused["headers"]["Retry-After"] == "2"
    assert json.loads(refused["body"])["error"]["code"] == "rate_limited"
    admin = {**event, "requestContext": {"requestId": "r2"}}  # no tenant: not charged
    assert app.resolve(admin, None)["statusCode"] == 404  # type: ignore[arg-type]
