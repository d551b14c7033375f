"""Lifecycle attempts, dirty marks and rollups under concurrent writers and crashes (moto's
server): concurrent identical batches count each attempt new once; ingest and aggregation killed
after any of their writes, then retried (the client's retry, the next scheduled run), report
exactly the ground truth."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infercrane.domain import capacity_synth
from infercrane.domain.capacity import CapacityService
from tests.unit.test_capacity import assert_matches_truth

END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=5)
WRITES = {"put_attempts", "mark_dirty", "update_classifications", "put_rollups", "put_rollup",
          "put_day_rollups", "clear_dirty", "reschedule"}


class Crash(BaseException):
    """The function killed (a BaseException: the aggregator's per-hour `except Exception` must
    not absorb it as it absorbs a failed write)."""


class Crashing:
    """The real store, killed right after its k-th write."""

    def __init__(self, real: Any, crash_after: int | None):
        self.real, self.crash_after, self.writes = real, crash_after, 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.real, name)
        if name not in WRITES:
            return method

        def write(*args: Any, **kwargs: Any) -> Any:
            answer = method(*args, **kwargs)
            self.writes += 1
            if self.writes == self.crash_after:
                raise Crash
            return answer
        return write


def run(store: Any, tenant: str, synth: Any) -> None:
    svc = CapacityService(store)
    for batch in capacity_synth.batches(synth.attempts):
        assert svc.ingest(tenant, batch, NOW).rejected == 0
    svc.aggregate(NOW)


def test_concurrent_identical_batches_count_each_attempt_new_once(aws):
    synth = capacity_synth.generate(100, seed=5, end=END, id_prefix="c", hours=6)
    services = [CapacityService(aws.container.capacity_store) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda s: s.ingest("race", synth.attempts, NOW), services))
    assert sum(r.new for r in results) == 100
    svc = CapacityService(aws.container.capacity_store)
    svc.aggregate(NOW)
    assert_matches_truth(svc.report("race", "24h", END, None, NOW), synth)


def test_ingest_and_aggregation_killed_after_any_write_converge_when_retried(aws):
    synth = capacity_synth.generate(20, seed=6, end=END, id_prefix="k", hours=3)
    clean = Crashing(aws.container.capacity_store, None)
    run(clean, "clean", synth)
    assert clean.writes >= 5
    for k in range(1, clean.writes + 1):
        tenant = f"crash{k}"
        with pytest.raises(Crash):
            run(Crashing(aws.container.capacity_store, k), tenant, synth)
        run(aws.container.capacity_store, tenant, synth)  # the retry, then the next run
        svc = CapacityService(aws.container.capacity_store)
        assert_matches_truth(svc.report(tenant, "24h", END, None, NOW), synth)
        assert aws.container.capacity_store.dirty_hours(tenant, 0, 10**7) == []


class Overlapped:
    """The real store, with a second aggregator run (after a new attempt) slipped in between this
    run's reading of the marks and its rollup write: what an overlapping run does."""

    def __init__(self, real: Any, meanwhile: Any):
        self.real, self.meanwhile = real, meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def put_rollups(self, *args: Any, **kwargs: Any) -> Any:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return self.real.put_rollups(*args, **kwargs)


def test_an_overlapping_run_that_read_an_older_mark_never_overwrites_a_newer_rollup(aws):
    synth = capacity_synth.generate(30, seed=8, end=END, id_prefix="o", hours=1)
    extra = capacity_synth.generate(1, seed=9, end=END, id_prefix="x", hours=1)
    store = aws.container.capacity_store
    CapacityService(store).ingest("lap", synth.attempts, NOW)

    def newer_run() -> None:
        CapacityService(store).ingest("lap", extra.attempts, NOW)
        CapacityService(store).aggregate(NOW)

    CapacityService(Overlapped(store, newer_run)).aggregate(NOW)
    report = CapacityService(store).report("lap", "24h", END, None, NOW)
    assert sum(g["samples"] for g in report["groups"]) == 31


def test_aggregators_racing_an_ingest_converge_on_the_ground_truth(aws):
    synth = capacity_synth.generate(120, seed=10, end=END, id_prefix="r", hours=3)
    batches = list(capacity_synth.batches(synth.attempts, size=10))
    store = aws.container.capacity_store

    def ingest() -> None:
        for batch in batches:
            CapacityService(store).ingest("racing", batch, NOW)

    def aggregate() -> None:
        for _ in range(3):
            CapacityService(store).aggregate(NOW)

    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(ingest)] + [pool.submit(aggregate) for _ in range(3)]:
            f.result()
    CapacityService(store).aggregate(NOW)  # the next scheduled run
    assert_matches_truth(CapacityService(store).report("racing", "24h", END, None, NOW), synth)
    assert store.dirty_hours("racing", 0, 10**7) == []


def test_a_day_built_from_an_hour_since_rewritten_is_not_written(aws):
    from infercrane.domain.capacity import DayRollup, day_of

    synth = capacity_synth.generate(20, seed=11, end=END, id_prefix="d", hours=2)
    store = aws.container.capacity_store
    run(store, "day", synth)
    hours = sorted({h.hour for h in store.rollups("day", 0, 10**7)})
    day = day_of(hours[0])
    read = list(store.rollups("day", day * 24, (day + 1) * 24))
    built = DayRollup.build("day", day, read[0].classifier_version, read)
    # Another run rewrites one of the day's hours (from a newer mark) after this one read it.
    svc = CapacityService(store)
    svc.ingest("day", capacity_synth.generate(1, seed=12, end=END, id_prefix="late",
                                              hours=1).attempts, NOW)
    [mark] = store.dirty_hours("day", 0, 10**7)
    rollup, _ = svc._recompute("day", mark.hour)
    assert store.put_rollups([rollup], [mark]) == [True]
    assert store.put_day_rollups([built], [[]], [read]) == [False]
    assert store.put_day_rollups([built], [[]], [list(store.rollups("day", day * 24,
                                                                     (day + 1) * 24))]) == [True]
