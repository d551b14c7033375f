"""Rollups: every group of one (tenant, hour) (`HourRollup`) and of one closed UTC day
(`DayRollup`), the merges that build days and reports from them (`GroupMerge`, `DurationMerge`),
and the marks of the tenant-hours waiting to be rolled up (`DirtyMark`)."""

from __future__ import annotations

import json
import operator
import sys
import uuid
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from infercrane.domain import classifier as _classifier
from infercrane.domain.capacity.attempts import StoredAttempt, classify_attempt
from infercrane.domain.capacity.durations import MAPPING, DurationSummary
from infercrane.domain.capacity.packing import LANE_TYPES, DayDurations, pack_counts, unpack_lanes

if TYPE_CHECKING:
    from infercrane.ports.capacity import CapacityStore

EXACT_PER_HOUR = 64  # a group-hour keeps exact values up to this many, a sketch beyond
EXACT_PER_DAY = 64  # a day rollup keeps a group-day's exact values up to this many, a sketch beyond

GroupKey = tuple[str | None, ...]


@dataclass
class GroupStats:
    samples: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    capacity_structural: int = 0
    durations: DurationSummary = field(default_factory=DurationSummary)

    def add(self, a: StoredAttempt) -> None:
        self.samples += 1
        if a.outcome == "succeeded":
            self.succeeded += 1
        elif a.outcome == "failed":
            self.failed += 1
            cls = a.failure_class or "unknown"
            self.failures[cls] = self.failures.get(cls, 0) + 1
            if cls == "capacity" and a.persistent:
                self.capacity_structural += 1
        else:
            self.cancelled += 1
        d = a.duration_ms
        if d is not None:
            self.durations.add(d)

    def merge_counts(self, other: GroupStats) -> None:
        self.samples += other.samples
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.cancelled += other.cancelled
        for k, v in other.failures.items():
            self.failures[k] = self.failures.get(k, 0) + v
        self.capacity_structural += other.capacity_structural

    def to_document(self) -> dict[str, Any]:
        return {"s": self.samples, "ok": self.succeeded, "f": self.failed, "c": self.cancelled,
                "fc": dict(sorted(self.failures.items())), "cs": self.capacity_structural,
                "d": self.durations.to_document()}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> GroupStats:
        return cls(int(doc["s"]), int(doc["ok"]), int(doc["f"]), int(doc["c"]),
                   {str(k): int(v) for k, v in doc["fc"].items()}, int(doc["cs"]),
                   DurationSummary.from_document(doc["d"]))


@dataclass
class HourRollup:
    """Every group of one (tenant, hour of started_at), built from all of that hour's attempts."""

    tenant: str
    hour: int
    classifier_version: str
    groups: dict[tuple[str, ...], GroupStats] = field(default_factory=dict)
    attempts: int = 0
    # As read back: the token of the mark it was built from (None if written without one). A
    # day is compacted only while each of its hours still holds the token it was read with.
    token: str | None = None

    @classmethod
    def build(cls, tenant: str, hour: int, attempts: Iterable[StoredAttempt],
              version: str) -> HourRollup:
        rollup = cls(tenant, hour, version)
        for a in attempts:
            rollup.groups.setdefault(a.group, GroupStats()).add(a)
            rollup.attempts += 1
        for g in rollup.groups.values():
            g.durations.compact(EXACT_PER_HOUR)
        return rollup

    def group_docs(self) -> list[dict[str, Any]]:
        return [{"k": list(k), **g.to_document()} for k, g in sorted(self.groups.items())]

    @classmethod
    def from_group_docs(cls, tenant: str, hour: int, version: str,
                        docs: Iterable[Mapping[str, Any]], token: str | None = None) -> HourRollup:
        rollup = cls(tenant, hour, version, token=token)
        for d in docs:
            rollup.groups[tuple(d["k"])] = GroupStats.from_document(d)
        rollup.attempts = sum(g.samples for g in rollup.groups.values())
        return rollup


def rebuild_hour(store: CapacityStore, tenant: str, hour: int, classify: Callable[..., Any],
                 version: str) -> tuple[HourRollup, list[StoredAttempt]]:
    """The hour's rollup from its stored attempts, classified by `version`; and the attempts that
    had another version (re-classified here, for the aggregator to store)."""
    fresh: list[StoredAttempt] = []
    changed: list[StoredAttempt] = []
    for stored in store.attempts_in_hour(tenant, hour):
        a = stored
        if a.classifier_version != version:
            a = classify_attempt(a, classify, version)
            changed.append(a)
        fresh.append(a)
    return HourRollup.build(tenant, hour, fresh, version), changed


class DurationMerge:
    """Durations of one report group (or one group-day being compacted), merged from hour parts
    (`DurationSummary`) and day parts (`DayDurations`). Nothing is decoded while parts are added:
    `finish` decodes the exact values when the group is answered exactly, else the sketches."""

    def __init__(self) -> None:
        self.n = 0
        self.min: int | None = None
        self.max: int | None = None
        self.exact = True
        self._values: list[list[int] | str] = []  # lists (hour parts) or JSON texts (day parts)
        self._keys: list[list[int]] = []  # bucket keys of the hour parts' exact values
        self._zero_exact = 0  # hour parts' exact values <= 0
        self._bins: dict[int, int] = {}  # hour parts' sparse sketches
        self._zero = 0
        self._dense: list[tuple[int, str]] = []

    def _bounds(self, n: int, lo: int | None, hi: int | None) -> None:
        self.n += n
        if lo is not None:
            self.min = lo if self.min is None else min(self.min, lo)
        if hi is not None:
            self.max = hi if self.max is None else max(self.max, hi)

    def add_hour(self, d: DurationSummary) -> None:
        if d.n == 0:
            return
        self._bounds(d.n, d.min, d.max)
        if d.values is not None:
            keys = d.keys if d.keys is not None else [MAPPING.key(v) for v in d.values if v > 0]
            self._values.append(d.values)
            self._keys.append(keys)
            self._zero_exact += len(d.values) - len(keys)
        else:
            self.exact = False
            for k, c in d.bins.items():
                self._bins[k] = self._bins.get(k, 0) + c
            self._zero += d.zero

    def add_day(self, d: DayDurations) -> None:
        if d.n == 0:
            return
        self._bounds(d.n, d.min, d.max)
        if d.values_text is None:
            self.exact = False
        else:
            self._values.append(d.values_text)
        self._dense.append((d.lo, d.counts))
        self._zero += d.zero

    def is_exact(self, limit: int) -> bool:
        return self.exact and self.n <= limit

    def exact_values(self) -> list[int]:
        texts = [p for p in self._values if isinstance(p, str) and p]
        # The day parts' texts joined into one JSON list: one decode however many days.
        out: list[int] = json.loads("[" + ",".join(texts) + "]") if texts else []
        for part in self._values:
            if not isinstance(part, str):
                out.extend(part)
        out.sort()
        return out

    def dense(self) -> tuple[int, list[int], int]:
        """(lo, counts from bucket lo up, zero count) of every part, hour and day alike.

        The day parts are added as big integers with one lane a bucket: one C-level addition a
        day instead of one Python addition a bucket. No lane can carry into the next: a bucket's
        sum is at most n, and the lanes are wide enough to hold n."""
        bins: dict[int, int] = dict(self._bins)
        for keys in self._keys:
            for k, c in Counter(keys).items():
                bins[k] = bins.get(k, 0) + c
        zero = self._zero + self._zero_exact
        lane = next(w for w in LANE_TYPES if self.n < 1 << (8 * w))
        dense = [(start, *unpack_lanes(text, lane)) for start, text in self._dense]
        if not dense and not bins:
            return 0, [], zero
        lo = min([start for start, _, _ in dense] + list(bins))
        hi = max([start + size for start, _, size in dense] + [k + 1 for k in bins])
        total = 0
        for start, lanes, _ in dense:
            total += lanes << (8 * lane * (start - lo))
        summed = array(LANE_TYPES[lane], total.to_bytes(lane * (hi - lo), "little"))
        if sys.byteorder != "little":
            summed.byteswap()
        counts = summed.tolist()
        for k, c in bins.items():
            counts[k - lo] += c
        return lo, counts, zero

    def finish(self, limit: int) -> DurationSummary:
        """The merged summary: exact while every part kept its values and n <= limit."""
        if self.is_exact(limit):
            values = self.exact_values()
            return DurationSummary(values=values, n=self.n, min=self.min, max=self.max, keys=None)
        lo, counts, zero = self.dense()
        bins = dict(zip(range(lo, lo + len(counts)), counts, strict=True))  # zeros are harmless
        return DurationSummary(values=None, bins=bins, zero=zero, n=self.n, min=self.min,
                               max=self.max, keys=None)

    def day_durations(self) -> DayDurations:
        lo, counts, zero = self.dense()
        # The values as JSON list items without the brackets, so a report joins many days'.
        text = (",".join(map(str, self.exact_values()))
                if self.is_exact(EXACT_PER_DAY) else None)
        return DayDurations(self.n, self.min, self.max, text, lo, pack_counts(counts), zero)


def _counts_row(g: GroupStats) -> list[int]:
    """A group's counts as one row (a day rollup stores them so): samples, succeeded, failed,
    cancelled, structural capacity, then failures by class in FAILURE_CLASSES order."""
    return [g.samples, g.succeeded, g.failed, g.cancelled, g.capacity_structural,
            *(g.failures.get(c, 0) for c in _classifier.FAILURE_CLASSES)]


def _row_counts(row: Sequence[int]) -> GroupStats:
    failures: dict[str, int] = {c: v for c, v in zip(_classifier.FAILURE_CLASSES, row[5:],
                                                      strict=True) if v}
    return GroupStats(row[0], row[1], row[2], row[3], failures, row[4])


class GroupMerge:
    """One group's counts and durations merged from hour and day parts: the one merge path of
    reports and day compaction. Day parts' count rows are added element-wise."""

    def __init__(self) -> None:
        self.counts = GroupStats()
        self.row: list[int] | None = None
        self.durations = DurationMerge()

    def add_hour(self, g: GroupStats) -> None:
        self.counts.merge_counts(g)
        self.durations.add_hour(g.durations)

    def add_day(self, row: list[int], d: DayDurations) -> None:
        self.row = row if self.row is None else list(map(operator.add, self.row, row))
        self.durations.add_day(d)

    def stats(self, exact_limit: int) -> GroupStats:
        counts = replace(self.counts, failures=dict(self.counts.failures))
        if self.row is not None:
            counts.merge_counts(_row_counts(self.row))
        counts.durations = self.durations.finish(exact_limit)
        return counts


@dataclass
class DayRollup:
    """Every group of one closed (tenant, UTC day), merged from the day's hour rollups: per group
    a counts row (`_counts_row`) and its durations."""

    tenant: str
    day: int
    classifier_version: str
    groups: dict[tuple[str, ...], tuple[list[int], DayDurations]] = field(default_factory=dict)

    @classmethod
    def build(cls, tenant: str, day: int, version: str,
              hours: Iterable[HourRollup]) -> DayRollup:
        merged: dict[tuple[str, ...], GroupMerge] = {}
        for rollup in hours:
            for key, g in rollup.groups.items():
                merged.setdefault(key, GroupMerge()).add_hour(g)
        return cls(tenant, day, version, {k: (_counts_row(m.counts), m.durations.day_durations())
                                          for k, m in sorted(merged.items())})

    def group_docs(self) -> list[dict[str, Any]]:
        return [{"k": list(k), "c": row, "d": d.to_document()} for k, (row, d) in self.groups.items()]

    @classmethod
    def from_group_docs(cls, tenant: str, day: int, version: str,
                        docs: Iterable[Mapping[str, Any]]) -> DayRollup:
        rollup = cls(tenant, day, version)
        for d in docs:
            rollup.groups[tuple(d["k"])] = (d["c"], DayDurations.from_document(d["d"]))
        return rollup


# ---------------------------------------------------------------------------- the work list
@dataclass(frozen=True)
class DirtyMark:
    tenant: str
    hour: int
    token: str
    dirty_at_ms: int
    # True: the hour's rollup is current and the mark only waits for the hour's day to close
    # (`dirty_at_ms` is then the day's end), when the aggregator compacts the day. Reports read
    # the rollup of such an hour, not its attempts.
    rolled: bool = False


def new_token() -> str:
    return uuid.uuid4().hex

