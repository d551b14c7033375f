"""Port: lifecycle attempts, dirty tenant-hour markers, hour and day rollups (one store)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from infercrane.domain.capacity import DayRollup, DirtyMark, HourRollup, StoredAttempt


class CapacityStore(Protocol):
    def existing_attempt_ids(self, tenant: str, attempt_ids: Sequence[str]) -> set[str]:
        """Which of these attempt ids the tenant has stored already."""

    def put_attempts(self, attempts: Sequence[StoredAttempt]) -> int:
        """Store attempts whose id is not stored yet (conditional writes); how many this call
        stored (of concurrent first writes of one id, exactly one counts it)."""

    def update_classifications(self, attempts: Sequence[StoredAttempt]) -> None:
        """Rewrite attempts re-classified by a newer classifier version."""

    def attempts_in_hour(self, tenant: str, hour: int) -> Iterator[StoredAttempt]:
        """Every attempt of the tenant whose started_at falls in `hour` (hours since the epoch)."""

    def mark_dirty(self, tenant: str, hours: Iterable[int], now_ms: int) -> None:
        """Mark tenant-hours as needing a (re)rollup; a new mark replaces an older one."""

    def dirty_hours(self, tenant: str, start_hour: int, end_hour: int) -> list[DirtyMark]:
        """The tenant's dirty hours in [start_hour, end_hour) (strongly consistent)."""

    def pending(self, before_ms: int, limit: int) -> list[DirtyMark]:
        """Dirty tenant-hours of every tenant, marked before `before_ms`, oldest first."""

    def clear_dirty(self, mark: DirtyMark) -> bool:
        """Remove the mark only if it was not re-marked since it was read."""

    def reschedule(self, mark: DirtyMark, due_ms: int) -> bool:
        """Turn the mark into a `rolled` one due at `due_ms`, only if it was not re-marked since
        it was read (False then, and the newer mark stays)."""

    def put_rollup(self, rollup: HourRollup, mark: DirtyMark | None = None) -> bool:
        """Replace the tenant-hour's rollup (only while `mark`, if given, holds its token)."""

    def put_rollups(self, rollups: Sequence[HourRollup],
                    marks: Sequence[DirtyMark] | None = None) -> list[bool]:
        """Replace each tenant-hour's rollup (batched: what `put_rollup` does for each). With
        `marks` (the mark each was built from), a rollup is written only if its mark still
        holds the token read, atomically with that check: a run that read an older mark never
        writes over a newer run's rollup. Which were written."""

    def rollups(self, tenant: str, start_hour: int, end_hour: int) -> Iterator[HourRollup]:
        """The tenant's rollups for hours in [start_hour, end_hour), one per stored item, in
        hour order (a large hour may span several items: yielded once per item)."""

    def rollups_of_version(self, version: str, limit: int) -> list[tuple[str, int]]:
        """(tenant, hour) of rollups built by a given classifier version, all tenants."""

    def put_day_rollups(self, rollups: Sequence[DayRollup],
                        marks: Sequence[Sequence[DirtyMark]] | None = None,
                        hours: Sequence[Sequence[HourRollup]] | None = None) -> list[bool]:
        """Replace each tenant-day's day rollup (batched); with `marks` and `hours` (the day's
        marks and hour rollups read, per rollup), only while every mark still holds its token
        and every hour rollup is still the one read (its `token`). Which were written."""

    def day_rollups(self, tenant: str, start_day: int, end_day: int) -> Iterator[DayRollup]:
        """The tenant's day rollups for days in [start_day, end_day), one per stored item, in
        day order (a large day may span several items: yielded once per item)."""
