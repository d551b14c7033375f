"""Cache observations and prefetch requests under concurrent writers (threads against moto's
server): one request per key however many callers race, the newest observation wins whatever the
order of arrival, and an expiry is applied once however many sweepers race. (A crash between a
prefetch request's write and its enqueue is test_cache_prefetch.py's FailingTransport case.)"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.domain.cache import CacheService, CacheSweeper
from infercrane.domain.prefetch import PrefetchService
from tests.integration.test_cache_prefetch import DIGEST, Clock


def prefetch(aws: Any, clock: Clock) -> PrefetchService:
    c = aws.container
    return PrefetchService(c.cache_store, c.prefetch_queue, c.adapter_transports, clock)


def test_concurrent_identical_prefetch_requests_create_exactly_one(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    services = [prefetch(aws, clock) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(
            lambda s: s.request("demo", DIGEST, "aws", "us-east-1a", "snap-0123"), services))
    assert sum(created for _, created in answers) == 1
    assert len({req.id for req, _ in answers}) == 1
    messages = aws.client("sqs").receive_message(
        QueueUrl=aws.settings.prefetch_queue_url, MaxNumberOfMessages=10).get("Messages", [])
    assert len(messages) == 1


def test_concurrent_reports_leave_the_newest_observation_whatever_the_order(aws: Any) -> None:
    start = datetime.now(UTC) - timedelta(minutes=30)
    clock = Clock(datetime.now(UTC))
    reports = [(start + timedelta(seconds=n), "present" if n % 2 else "missing")
               for n in range(24)]
    random.Random(7).shuffle(reports)
    cache = CacheService(aws.container.cache_store, clock)
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda r: cache.report("demo", DIGEST, "aws", "us-east-1a", r[1],
                                             {"snapshot_id": "s"}, r[0], ttl_seconds=3600),
                      reports))
    [only] = aws.container.cache_store.list_observations("demo", DIGEST, None, None)
    newest = max(reports)
    assert (only.observed_at, only.state) == newest


def test_racing_sweepers_expire_an_observation_once(aws: Any) -> None:
    clock = Clock(datetime.now(UTC))
    cache = CacheService(aws.container.cache_store, clock)
    cache.report("demo", DIGEST, "aws", "us-east-1a", "present", {"snapshot_id": "s"},
                 clock.now, ttl_seconds=60)
    sweepers = [CacheSweeper(aws.container.cache_store, prefetch(aws, clock), clock)
                for _ in range(4)]
    later = clock.now + timedelta(seconds=61)
    with ThreadPoolExecutor(4) as pool:
        expired = list(pool.map(lambda s: s.sweep(later).observations_expired, sweepers))
    assert sum(expired) == 1
    events = [a["event"] for a in aws.container.cache_store.audit("demo", DIGEST)]
    assert sorted(events) == ["expired", "reported"]
