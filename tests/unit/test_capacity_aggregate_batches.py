"""The aggregator writes rollups in batches; a batch the store refuses falls back to one write per
hour, so only the hour that cannot be written stays dirty."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from infercrane.domain import capacity_synth
from infercrane.domain.capacity import CapacityService, DirtyMark, HourRollup
from infercrane.errors import DependencyUnavailable
from tests.support.capacity_memory import MemoryCapacityStore

END = datetime(2026, 11, 29, tzinfo=UTC)
NOW = END + timedelta(minutes=5)


class RefusingStore(MemoryCapacityStore):
    """Refuses every batched write, and the single write of one hour."""

    bad_hour: int = -1
    batches: int = 0

    def put_rollups(self, rollups: Sequence[HourRollup],
                    marks: Sequence[DirtyMark] | None = None) -> list[bool]:
        self.batches += 1
        raise DependencyUnavailable("batch refused")

    def put_rollup(self, rollup: HourRollup, mark: DirtyMark | None = None) -> bool:
        if rollup.hour == self.bad_hour:
            raise DependencyUnavailable("hour refused")
        return super().put_rollup(rollup, mark)


def loaded(store: MemoryCapacityStore) -> CapacityService:
    svc = CapacityService(store)
    synth = capacity_synth.generate(600, seed=9, end=END, hours=150)
    for batch in capacity_synth.batches(synth.attempts):
        svc.ingest("acme", batch, NOW)
    return svc


def test_a_refused_batch_leaves_only_the_refused_hour_dirty() -> None:
    store = RefusingStore()
    svc = loaded(store)
    hours = sorted(h for (_, h) in store.marks)
    store.bad_hour = hours[7]
    result = svc.aggregate(NOW)
    assert store.batches == 2  # 150 hours in batches of 100
    assert (result.hours, result.still_dirty) == (len(hours) - 1, 1)
    assert list(store.marks) == [("acme", hours[7])]
    assert ("acme", hours[7]) not in store.rollup_items
    assert len(store.rollup_items) == len(hours) - 1


def test_batches_store_what_hour_by_hour_writes_store() -> None:
    batched, single = MemoryCapacityStore(), MemoryCapacityStore()
    loaded(batched).aggregate(NOW)
    svc = loaded(single)
    # The oracle: each hour rolled up and written alone, through the port's single write.
    for mark in single.pending(before_ms=10**13, limit=10_000):
        rollup, _ = svc._recompute(mark.tenant, mark.hour)
        single.put_rollup(rollup)
    assert batched.rollup_items == single.rollup_items
    assert not batched.marks
