"""The aggregator: dirty tenant-hours (all tenants) rolled up into hour rollups, closed UTC days
compacted into day rollups, rollups of older classifier versions re-classified."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infercrane.domain.capacity.hours import DAY_HOURS, HOUR_MS, day_of
from infercrane.domain.capacity.rollups import DayRollup, DirtyMark, HourRollup, rebuild_hour
from infercrane.domain.windows import epoch_ms

if TYPE_CHECKING:
    from infercrane.ports.capacity import CapacityStore

log = logging.getLogger(__name__)

AGGREGATE_BATCH = 100  # tenant-hours rolled up, written and cleared together


@dataclass(frozen=True)
class AggregateResult:
    hours: int
    attempts: int
    reclassified: int
    stale_marked: int
    still_dirty: int
    days: int = 0  # day rollups compacted
    awaiting_day_close: int = 0  # hours rolled up whose day is still open

    def to_document(self) -> dict[str, int]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class Aggregator:
    """What a run works with: the store, and the classifier (with its version) that rollups are
    built by; `previous_versions` holds only the older ones."""

    store: CapacityStore
    classify: Callable[..., Any]
    version: str
    previous_versions: Sequence[str]
    settle_ms: int

    def run(self, now: datetime, max_hours: int,
            time_left_ms: Callable[[], int] | None) -> AggregateResult:
        """Roll up dirty tenant-hours (all tenants), re-classifying attempts of older versions.
        Stops early when `time_left_ms` drops below 20 s; the next run continues."""
        now_ms = epoch_ms(now)
        stale = 0
        for old in self.previous_versions:
            for tenant, hour in self.store.rollups_of_version(old, limit=max_hours):
                self.store.mark_dirty(tenant, [hour], now_ms)
                stale += 1
        hours = attempts = reclassified = left = waiting = 0
        done: list[DirtyMark] = []
        marks = self.store.pending(before_ms=now_ms, limit=max_hours)
        # Rolled up AGGREGATE_BATCH tenant-hours at a time: their rollups go out in one batched
        # write (one keys-only Query per tenant finds the parts to replace), and their marks are
        # cleared once the rollups are stored.
        for start in range(0, len(marks), AGGREGATE_BATCH):
            built: list[tuple[DirtyMark, HourRollup]] = []
            for mark in marks[start:start + AGGREGATE_BATCH]:
                if time_left_ms is not None and time_left_ms() < 20_000:
                    left += 1
                    continue
                if mark.rolled:
                    # Its rollup is current (a new attempt would have replaced this mark with a
                    # dirty one): it only waits for its day to close, which is now. Rolling the
                    # hour up again would re-read every attempt of it for nothing.
                    done.append(mark)
                    continue
                try:
                    rollup, changed = rebuild_hour(self.store, mark.tenant, mark.hour, self.classify,
                                                   self.version)
                    if changed:
                        self.store.update_classifications(changed)
                except Exception as exc:
                    # One tenant-hour that cannot be rolled up (a poisoned item, or a write that
                    # failed) never stops the others: it stays dirty, so the next run tries
                    # again and reports read it as tail meanwhile. Logged by key, never content.
                    _skipped(mark, exc)
                    left += 1
                    continue
                built.append((mark, rollup))
                reclassified += len(changed)
            stored = self._store_rollups(built)
            left += len(built) - len(stored)
            done += [m for m, _ in stored]
            hours += len(stored)
            attempts += sum(r.attempts for _, r in stored)
        # A closed day is compacted from its stored hour rollups before its marks are cleared, so
        # a report never trusts a day rollup older than one of the day's hours; an hour of a day
        # still open keeps a `rolled` mark due at the day's end, which brings it back here to
        # compact the day once it closes. Days are compacted once all batches are stored, so a
        # day whose hours fell in two batches is compacted once.
        closed = {(m.tenant, day_of(m.hour)) for m in done
                  if _day_end_ms(day_of(m.hour)) <= now_ms}
        compacted = self._compact_days(closed, done)
        days = len(compacted)
        for mark in done:
            # A mark younger than the settle time stays: the hour index may not show its newest
            # attempts yet, so the next run rolls the hour up again (reports read it as tail).
            # Each mark is cleared by a conditional delete of its own (only if not re-marked since
            # it was read); a transaction would batch them, but one re-marked hour would cancel
            # the whole transaction.
            day = day_of(mark.hour)
            if mark.dirty_at_ms > now_ms - self.settle_ms:
                left += 1
            elif (mark.tenant, day) in compacted:
                left += not self.store.clear_dirty(mark)
            elif (mark.tenant, day) in closed:
                left += 1  # the day could not be compacted: the next run tries again
            elif self.store.reschedule(mark, _day_end_ms(day)):
                waiting += 1
            else:
                left += 1
        return AggregateResult(hours, attempts, reclassified, stale, left, days, waiting)

    def _store_rollups(self, built: list[tuple[DirtyMark, HourRollup]]
                       ) -> list[tuple[DirtyMark, HourRollup]]:
        """Store the rollups in one batch; if that fails, one by one, so a rollup the store
        refuses leaves only its own hour dirty. Each is written only while the mark it was built
        from holds the token read: an overlapping run that read an older mark (an attempt came
        since) never writes over a newer run's rollup; its hour stays marked."""
        try:
            written = self.store.put_rollups([r for _, r in built], [m for m, _ in built])
            return [b for b, ok in zip(built, written, strict=True) if ok]
        except Exception:
            stored = []
            for mark, rollup in built:
                try:
                    if not self.store.put_rollup(rollup, mark):
                        continue
                except Exception as exc:
                    _skipped(mark, exc)
                    continue
                stored.append((mark, rollup))
            return stored

    def _compact_days(self, days: set[tuple[str, int]],
                      done: Sequence[DirtyMark]) -> set[tuple[str, int]]:
        """Build and store the day rollups of closed (tenant, day)s from their stored hour
        rollups; returns those stored. A day with an hour of another classifier version is left
        (that hour is re-marked as stale and brings the day back). A day is written only while
        the marks of its hours read by this run (`done`) hold their tokens and every hour it
        was built from is still the rollup read (an overlapping run may have rewritten one)."""
        marks: dict[tuple[str, int], list[DirtyMark]] = {}
        for m in done:
            marks.setdefault((m.tenant, day_of(m.hour)), []).append(m)
        ordered = sorted(days)
        stored: set[tuple[str, int]] = set()
        for start in range(0, len(ordered), AGGREGATE_BATCH):
            built: list[DayRollup] = []
            read: list[list[HourRollup]] = []
            for tenant, day in ordered[start:start + AGGREGATE_BATCH]:
                try:
                    hours = list(self.store.rollups(tenant, day * DAY_HOURS,
                                                    (day + 1) * DAY_HOURS))
                except Exception as exc:
                    log.warning("aggregate: tenant %s day %d not compacted: %s", tenant, day,
                                type(exc).__name__)
                    continue
                if all(h.classifier_version == self.version for h in hours):
                    built.append(DayRollup.build(tenant, day, self.version, hours))
                    read.append(hours)
            try:
                written = self.store.put_day_rollups(
                    built, [marks.get((d.tenant, d.day), []) for d in built], read) if built else []
            except Exception as exc:
                log.warning("aggregate: %d day rollups not stored: %s", len(built),
                            type(exc).__name__)
                continue
            stored |= {(d.tenant, d.day) for d, ok in zip(built, written, strict=True) if ok}
        return stored


def _day_end_ms(day: int) -> int:
    return (day + 1) * DAY_HOURS * HOUR_MS


def _skipped(mark: DirtyMark, exc: Exception) -> None:
    log.warning("aggregate: tenant %s hour %d skipped: %s", mark.tenant, mark.hour,
                type(exc).__name__)
