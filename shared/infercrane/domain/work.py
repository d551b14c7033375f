"""Throttling by work: each tenant's request bodies are charged against a bucket of KiB.

API Gateway's usage plan counts requests, so a 500-item batch cost one token and a flood of
batches far under the request limit could starve another tenant. The `api` function therefore
charges every tenant request by its body, one unit per whole KiB (a body under 1 KiB is free and
costs no call), against the tenant's bucket: `rate` KiB a second, up to `burst` KiB at once. The
bucket is kept as GCRA's one number, the theoretical arrival time `tat` (ms): a charge of `c`
units moves it to max(tat, now) + c·T (T = 1000/rate ms) and is allowed while that stays within
burst·T of now; otherwise the request is refused with the seconds until it would fit.

A bucket's state is one number that only grows, so an environment that has seen it over the limit
can refuse without asking the store again (`_known`): that refusal is certain, and a flood's
refusals cost the store nothing. The store (`ports/work.py`) makes each charge atomic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from infercrane.errors import RateLimited
from infercrane.ports.work import WorkBuckets

KIB = 1024


class WorkMeter:
    def __init__(self, buckets: WorkBuckets, rate_kib_s: float, burst_kib: int,
                 clock: Callable[[], float] = time.time):
        if rate_kib_s <= 0 or burst_kib < 1:
            raise ValueError("a work bucket needs a positive rate and a burst of at least 1 KiB")
        self._buckets = buckets
        self._interval_ms = 1000.0 / rate_kib_s
        self._burst = burst_kib
        self._clock = clock
        self._known: dict[str, int] = {}  # tenant -> the latest tat seen (it only grows)

    def units(self, body_bytes: int) -> int:
        """Whole KiB of the body, at most the burst (a body larger than the burst empties the
        bucket rather than never passing)."""
        return min(self._burst, body_bytes // KIB)

    def charge(self, tenant: str, body_bytes: int) -> None:
        """Take the body's units from the tenant's bucket, or raise `RateLimited`."""
        units = self.units(body_bytes)
        if units == 0:
            return
        now = int(self._clock() * 1000)
        cost = math.ceil(units * self._interval_ms)
        latest = now + math.ceil(self._burst * self._interval_ms)  # the furthest tat allowed
        known = self._known.get(tenant, 0)
        if max(known, now) + cost > latest:
            self._refuse(known, now, cost, latest)
        charged, tat = self._buckets.advance(tenant, now_ms=now, cost_ms=cost, latest_ms=latest,
                                             known_ms=known)
        self._known[tenant] = max(known, tat)
        if not charged:
            self._refuse(tat, now, cost, latest)

    @staticmethod
    def _refuse(tat: int, now: int, cost: int, latest: int) -> None:
        wait_ms = max(tat, now) + cost - latest
        raise RateLimited("This tenant is over its work rate (KiB of request bodies per "
                          "second); retry after Retry-After seconds.",
                          retry_after_s=max(1, math.ceil(wait_ms / 1000)))
