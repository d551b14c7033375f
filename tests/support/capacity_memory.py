"""An in-memory CapacityStore (the port, no I/O) that counts what it reads."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infercrane.domain.capacity import (
    DayRollup,
    DirtyMark,
    HourRollup,
    StoredAttempt,
    new_token,
)
from infercrane.ports.capacity import CapacityStore


@dataclass
class MemoryCapacityStore:
    attempts: dict[tuple[str, str], StoredAttempt] = field(default_factory=dict)
    marks: dict[tuple[str, int], DirtyMark] = field(default_factory=dict)
    rollup_items: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    day_items: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
    by_hour: dict[tuple[str, int], dict[str, StoredAttempt]] = field(default_factory=dict)
    rollup_reads: int = 0
    attempt_reads: int = 0

    def existing_attempt_ids(self, tenant: str, attempt_ids: Sequence[str]) -> set[str]:
        return {a for a in attempt_ids if (tenant, a) in self.attempts}

    def put_attempts(self, attempts: Sequence[StoredAttempt]) -> int:
        new = [a for a in attempts if (a.tenant, a.attempt_id) not in self.attempts]
        self.update_classifications(new)
        return len(new)

    def update_classifications(self, attempts: Sequence[StoredAttempt]) -> None:
        for a in attempts:
            self.attempts[(a.tenant, a.attempt_id)] = a
            self.by_hour.setdefault((a.tenant, a.hour), {})[a.attempt_id] = a

    def attempts_in_hour(self, tenant: str, hour: int) -> Iterator[StoredAttempt]:
        for _, a in sorted(self.by_hour.get((tenant, hour), {}).items()):
            self.attempt_reads += 1
            yield a

    def mark_dirty(self, tenant: str, hours: Iterable[int], now_ms: int) -> None:
        for h in hours:
            self.marks[(tenant, h)] = DirtyMark(tenant, h, new_token(), now_ms)

    def dirty_hours(self, tenant: str, start_hour: int, end_hour: int) -> list[DirtyMark]:
        return [m for (t, h), m in sorted(self.marks.items())
                if t == tenant and start_hour <= h < end_hour]

    def pending(self, before_ms: int, limit: int) -> list[DirtyMark]:
        ready = sorted((m for m in self.marks.values() if m.dirty_at_ms <= before_ms),
                       key=lambda m: (m.dirty_at_ms, m.tenant, m.hour))
        return ready[:limit]

    def clear_dirty(self, mark: DirtyMark) -> bool:
        if self.marks.get((mark.tenant, mark.hour)) != mark:
            return False
        del self.marks[(mark.tenant, mark.hour)]
        return True

    def reschedule(self, mark: DirtyMark, due_ms: int) -> bool:
        if self.marks.get((mark.tenant, mark.hour)) != mark:
            return False
        self.marks[(mark.tenant, mark.hour)] = DirtyMark(mark.tenant, mark.hour, new_token(),
                                                         due_ms, rolled=True)
        return True

    def _holds(self, marks: Sequence[DirtyMark]) -> bool:
        return all(self.marks.get((m.tenant, m.hour)) == m for m in marks)

    def put_rollups(self, rollups: Sequence[HourRollup],
                    marks: Sequence[DirtyMark] | None = None) -> list[bool]:
        return [self.put_rollup(r, None if marks is None else marks[i])
                for i, r in enumerate(rollups)]

    def put_rollup(self, rollup: HourRollup, mark: DirtyMark | None = None) -> bool:
        if mark is not None and not self._holds([mark]):
            return False
        # Round-trip through JSON, as the DynamoDB adapter does.
        self.rollup_items[(rollup.tenant, rollup.hour)] = (
            rollup.classifier_version, json.dumps(rollup.group_docs()))
        return True

    def rollups(self, tenant: str, start_hour: int, end_hour: int) -> Iterator[HourRollup]:
        for (t, h), (version, docs) in sorted(self.rollup_items.items()):
            if t == tenant and start_hour <= h < end_hour:
                self.rollup_reads += 1
                yield HourRollup.from_group_docs(t, h, version, json.loads(docs))

    def rollups_of_version(self, version: str, limit: int) -> list[tuple[str, int]]:
        return [k for k, (v, _) in sorted(self.rollup_items.items()) if v == version][:limit]

    def put_day_rollups(self, rollups: Sequence[DayRollup],
                        marks: Sequence[Sequence[DirtyMark]] | None = None,
                        hours: Sequence[Sequence[HourRollup]] | None = None) -> list[bool]:
        written = []
        for i, rollup in enumerate(rollups):
            if marks is not None and not self._holds(marks[i]):
                written.append(False)
                continue
            self.day_items[(rollup.tenant, rollup.day)] = (
                rollup.classifier_version, json.dumps(rollup.group_docs()))
            written.append(True)
        return written

    def day_rollups(self, tenant: str, start_day: int, end_day: int) -> Iterator[DayRollup]:
        for (t, d), (version, docs) in sorted(self.day_items.items()):
            if t == tenant and start_day <= d < end_day:
                self.rollup_reads += 1
                yield DayRollup.from_group_docs(t, d, version, json.loads(docs))


# Held to its port: mypy (`make typecheck` checks this module) fails here when they drift apart.
if TYPE_CHECKING:
    _store: CapacityStore = MemoryCapacityStore()
