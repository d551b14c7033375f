"""The capacity report: a window's day rollups (windows over 7 days), hour rollups for the rest,
and the tail of hours not rolled up yet, merged per group into one document whose cost grows with
days x groups plus edge hours, never with the number of attempts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infercrane.domain import classifier as _classifier
from infercrane.domain.capacity.attempts import GROUP_DIMENSIONS, StoredAttempt
from infercrane.domain.capacity.durations import RELATIVE_ACCURACY, DurationSummary
from infercrane.domain.capacity.hours import DAY_HOURS, HOUR_MS, day_of, rfc
from infercrane.domain.capacity.rollups import GroupKey, GroupMerge, GroupStats, HourRollup
from infercrane.domain.uncertainty import (
    CONFIDENCE,
    MIN_N_RATE,
    STRENGTH_ORDER,
    STRENGTH_RULE,
    strength,
    wilson_interval,
)
from infercrane.domain.windows import epoch_ms, parse_window
from infercrane.errors import InvalidInput

if TYPE_CHECKING:
    from infercrane.ports.capacity import CapacityStore

EXACT_IN_REPORT = 500  # a report group answers exactly while all its parts are exact and n <= this
# Reports over more hours than this read whole days from day rollups; shorter ones read hour
# rollups only, so their exactness is bounded per hour (EXACT_PER_HOUR), not per day.
DAY_ROLLUPS_BEYOND_HOURS = 168
TAIL_READERS = 8  # a report's tail hours read at once (each one Query)
MIN_N_P50 = 5
MIN_N_P95 = 20
PERCENTILE_METHOD_EXACT = "exact: lower nearest rank, the value at 0-based index floor(q*(n-1))"
PERCENTILE_METHOD_SKETCH = (f"DDSketch (logarithmic buckets, relative error <= {RELATIVE_ACCURACY}"
                            " at the rank floor(q*(n-1)))")
SCOPE_NOTE = ("Tenant-observed data: only this tenant's own lifecycle attempts. It is not global "
              "availability and never includes other customers' data.")


@dataclass
class ReadCost:
    rollup_items: int = 0
    day_items: int = 0
    tail_hours: int = 0
    tail_attempts: int = 0


def parse_group_by(text: str | None) -> tuple[str, ...]:
    if text is None or not text.strip():
        return GROUP_DIMENSIONS
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names or any(n not in GROUP_DIMENSIONS for n in names) or len(set(names)) != len(names):
        raise InvalidInput("group_by lists distinct dimensions among adapter, runtime, "
                           "compute_mode, region and gpu, separated by commas.", field="group_by")
    return tuple(d for d in GROUP_DIMENSIONS if d in names)


def parse_hours(window: str) -> int:
    duration_ms = parse_window(window)
    if duration_ms % HOUR_MS:
        raise InvalidInput("A capacity window is a whole number of hours, for example 24h, 7d or "
                           "720h.", field="window")
    return duration_ms // HOUR_MS


def _percentile(d: DurationSummary, q: float, minimum: int) -> tuple[float | None, str | None]:
    if d.n < minimum:
        return None, f"too few finished attempts (n={d.n} < {minimum})"
    value = d.quantile_ms(q)
    return (None if value is None else round(value / 1000, 3)), None


def group_document(dims: Mapping[str, str | None], g: GroupStats) -> dict[str, Any]:
    decided = g.succeeded + g.failed
    failures = {c: g.failures.get(c, 0) for c in _classifier.FAILURE_CLASSES}
    p50, p50_reason = _percentile(g.durations, 0.50, MIN_N_P50)
    p95, p95_reason = _percentile(g.durations, 0.95, MIN_N_P95)
    capacity = failures["capacity"]
    interval = wilson_interval(g.succeeded, decided)
    return {
        **{d: dims.get(d) for d in GROUP_DIMENSIONS},
        "samples": g.samples, "succeeded": g.succeeded, "failed": g.failed,
        "cancelled": g.cancelled,
        "success_rate": round(g.succeeded / decided, 6) if decided else None,
        "success_rate_ci": None if interval is None else [round(v, 6) for v in interval],
        "success_rate_n": decided,
        "insufficient": decided < MIN_N_RATE,
        "evidence": strength(interval, decided),
        "failures": failures,
        "capacity_structural": g.capacity_structural,
        # Stock-outs only: structural capacity (type absent from a zone) is not a stock-out.
        "capacity_stockout_rate": (round((capacity - g.capacity_structural) / decided, 6)
                                   if decided else None),
        "capacity_dominant": g.failed > 0 and 2 * capacity >= g.failed,
        "duration_samples": g.durations.n,
        "p50_duration_s": p50, "p95_duration_s": p95,
        "p50_null_reason": p50_reason, "p95_null_reason": p95_reason,
        "p50_insufficient": p50_reason is not None, "p95_insufficient": p95_reason is not None,
        "duration_method": "exact" if g.durations.exact else "ddsketch",
        # Bound on |p - true| / true of p50/p95 at their rank: 0 when exact.
        "duration_relative_error": 0.0 if g.durations.exact else RELATIVE_ACCURACY,
    }



def build_report(store: CapacityStore, version: str,
                 recompute: Callable[[str, int], tuple[HourRollup, list[StoredAttempt]]],
                 tenant: str, window: str, until: datetime | None, group_by: str | None,
                 now: datetime) -> dict[str, Any]:
    """The tenant's report over `window` up to `until` (default: now); `recompute` rolls up one
    hour of the tail from its attempts."""
    hours = parse_hours(window)
    dims = parse_group_by(group_by)
    end_ms = epoch_ms(until if until is not None else now)
    end_hour = -(-end_ms // HOUR_MS)  # the hour holding `until` is included
    start_hour = end_hour - hours
    cost = ReadCost()
    marks = store.dirty_hours(tenant, start_hour, end_hour)
    dirty = {m.hour for m in marks if not m.rolled}
    marked_days = {day_of(m.hour) for m in marks}
    merged: dict[GroupKey, GroupMerge] = {}
    by_key: dict[tuple[str, ...], GroupMerge] = {}  # a stored group's key -> its report group

    def group(key: tuple[str, ...]) -> GroupMerge:
        found = by_key.get(key)
        if found is None:
            coarse = tuple(v if d in dims else None
                           for d, v in zip(GROUP_DIMENSIONS, key, strict=True))
            found = by_key[key] = merged.setdefault(coarse, GroupMerge())
        return found

    def fold(rollup: HourRollup) -> None:
        for key, g in rollup.groups.items():
            group(key).add_hour(g)

    # Whole days of the window come from day rollups when the day has no mark at all (a
    # marked day's rollup may be older than one of its hours) and the current classifier.
    covered: set[int] = set()
    first_day, end_day = -(-start_hour // DAY_HOURS), end_hour // DAY_HOURS
    if hours > DAY_ROLLUPS_BEYOND_HOURS and first_day < end_day:
        for day_rollup in store.day_rollups(tenant, first_day, end_day):
            cost.rollup_items += 1
            cost.day_items += 1
            if (day_rollup.day in marked_days
                    or day_rollup.classifier_version != version):
                continue
            covered.add(day_rollup.day)
            for key, (row, d) in day_rollup.groups.items():
                group(key).add_day(row, d)
    stale: set[int] = set()
    for lo, hi in _uncovered_runs(start_hour, end_hour, covered):
        for rollup in store.rollups(tenant, lo, hi):
            cost.rollup_items += 1
            if rollup.hour in dirty:
                continue
            if rollup.classifier_version != version:
                stale.add(rollup.hour)
                continue
            fold(rollup)
    # The tail is one Query per hour not yet rolled up (a first report after a large import
    # reads hundreds): they run side by side, as the round trips dominate, and fold in order.
    from concurrent.futures import ThreadPoolExecutor  # only a report with a tail needs it

    tail = sorted(dirty | stale)
    with ThreadPoolExecutor(max_workers=TAIL_READERS) as readers:
        for rollup, _ in readers.map(lambda hour: recompute(tenant, hour), tail):
            cost.tail_hours += 1
            cost.tail_attempts += rollup.attempts
            fold(rollup)
    stats = {k: m.stats(EXACT_IN_REPORT) for k, m in merged.items()}
    groups = [group_document(dict(zip(GROUP_DIMENSIONS, k, strict=True)), g)
              for k, g in stats.items()]
    # Strongest evidence first: a narrow interval over many attempts outranks 3 of 3.
    groups.sort(key=lambda d: (STRENGTH_ORDER[d["evidence"]], -d["samples"],
                               [str(d[x]) for x in GROUP_DIMENSIONS]))
    return {
        "window": {"duration": window, "hours": hours, "start": rfc(start_hour * HOUR_MS),
                   "end": rfc(end_hour * HOUR_MS), "alignment": "whole hours of started_at"},
        "scope": "tenant-observed",
        "note": SCOPE_NOTE,
        "group_by": list(dims),
        "classifier_version": version,
        "durations": {
            "exact": PERCENTILE_METHOD_EXACT, "sketch": PERCENTILE_METHOD_SKETCH,
            "relative_error": RELATIVE_ACCURACY, "exact_up_to_n": EXACT_IN_REPORT,
            "min_n_p50": MIN_N_P50, "min_n_p95": MIN_N_P95,
            "measured_on": "succeeded and failed attempts with finished_at",
        },
        "uncertainty": {"confidence": CONFIDENCE, "interval": "wilson",
                        "min_n_rate": MIN_N_RATE, "evidence_rule": STRENGTH_RULE},
        "groups": groups,
        "read": {"rollup_items": cost.rollup_items, "day_items": cost.day_items,
                 "tail_hours": cost.tail_hours,
                 "tail_attempts": cost.tail_attempts},
    }


def _uncovered_runs(start_hour: int, end_hour: int, days: set[int]) -> list[tuple[int, int]]:
    """The runs [lo, hi) of hours in [start_hour, end_hour) outside the given days."""
    runs: list[tuple[int, int]] = []
    hour = start_hour
    while hour < end_hour:
        if day_of(hour) in days:
            hour = (day_of(hour) + 1) * DAY_HOURS
            continue
        lo = hour
        while hour < end_hour and day_of(hour) not in days:
            hour += 1
        runs.append((lo, hour))
    return runs
