"""Capacity intelligence: this tenant's observed lifecycle attempts, normalized and rolled up.

An attempt is stored once per (tenant, attempt id) with its raw provider code and message and the
classifier version that classified it. The aggregator folds attempts into one rollup per
(tenant, hour of `started_at`) holding every group of that hour (exact counts, failures by class,
a mergeable duration summary), and each closed UTC day into one day rollup of its hours. A report
merges the window's day rollups (windows over 7 days), hour rollups for the rest, plus the tail of
hours that are not rolled up yet (marked dirty by ingest), so its cost grows with days x groups
plus edge hours, never with the number of attempts.

Durations (finished - started, succeeded and failed attempts with a `finished_at`) are summarized
exactly while small and as a DDSketch-style log-bucket histogram beyond (see `DurationSummary`).

Modules, lowest first: `hours` (hour and day keys), `attempts` (the stored attempt), `intake`
(the submitted attempt, its checks, batch results), `durations` (summaries and sketches),
`packing` (durations as a day rollup stores them), `rollups` (hour and day rollups, their
merges, dirty marks), `report`, `aggregate`, and `service` (`CapacityService`, what callers use);
`advice` (placement advice over a report) is imported by its route.

The names below are the package's public ones, each loaded from its module when first asked for
(`from infercrane.domain.capacity import X` as before): importing the package loads none of its
modules, so a function's cold start pays only for the parts it uses (service.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infercrane.domain.lazy import exports

# The module each public name lives in.
_HOMES: dict[str, tuple[str, ...]] = {
    "aggregate": ("AGGREGATE_BATCH", "AggregateResult", "Aggregator"),
    "attempts": ("GROUP_DIMENSIONS", "StoredAttempt", "classify_attempt"),
    "durations": ("RELATIVE_ACCURACY", "DurationSummary"),
    "hours": ("DAY_HOURS", "HOUR_MS", "day_from_key", "day_key", "day_of", "hour_from_key", "hour_key",
        "hour_of"),
    "batch": ("MAX_BATCH", "ItemError"),  # infercrane.domain.batch: the contract capture shares
    "intake": ("MAX_START_SKEW", "MAX_START_SKEW_MS", "AttemptIn", "IngestResult", "Outcome", "batch_of",
        "validate_attempt"),
    "packing": ("DayDurations",),
    "report": ("DAY_ROLLUPS_BEYOND_HOURS", "EXACT_IN_REPORT", "MIN_N_P50", "MIN_N_P95",
        "PERCENTILE_METHOD_EXACT", "PERCENTILE_METHOD_SKETCH", "SCOPE_NOTE", "TAIL_READERS", "ReadCost",
        "build_report", "group_document", "parse_group_by", "parse_hours"),
    "rollups": ("EXACT_PER_DAY", "EXACT_PER_HOUR", "DayRollup", "DirtyMark", "DurationMerge", "GroupKey",
        "GroupMerge", "GroupStats", "HourRollup", "new_token"),
    "service": ("CapacityService",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

if TYPE_CHECKING:  # what the type checker reads; tests/unit/test_capacity_package.py holds it to _HOMES
    from infercrane.domain.batch import MAX_BATCH, ItemError
    from infercrane.domain.capacity.aggregate import AGGREGATE_BATCH, AggregateResult, Aggregator
    from infercrane.domain.capacity.attempts import GROUP_DIMENSIONS, StoredAttempt, classify_attempt
    from infercrane.domain.capacity.durations import RELATIVE_ACCURACY, DurationSummary
    from infercrane.domain.capacity.hours import (
        DAY_HOURS,
        HOUR_MS,
        day_from_key,
        day_key,
        day_of,
        hour_from_key,
        hour_key,
        hour_of,
    )
    from infercrane.domain.capacity.intake import (
        MAX_START_SKEW,
        MAX_START_SKEW_MS,
        AttemptIn,
        IngestResult,
        Outcome,
        batch_of,
        validate_attempt,
    )
    from infercrane.domain.capacity.packing import DayDurations
    from infercrane.domain.capacity.report import (
        DAY_ROLLUPS_BEYOND_HOURS,
        EXACT_IN_REPORT,
        MIN_N_P50,
        MIN_N_P95,
        PERCENTILE_METHOD_EXACT,
        PERCENTILE_METHOD_SKETCH,
        SCOPE_NOTE,
        TAIL_READERS,
        ReadCost,
        build_report,
        group_document,
        parse_group_by,
        parse_hours,
    )
    from infercrane.domain.capacity.rollups import (
        EXACT_PER_DAY,
        EXACT_PER_HOUR,
        DayRollup,
        DirtyMark,
        DurationMerge,
        GroupKey,
        GroupMerge,
        GroupStats,
        HourRollup,
        new_token,
    )
    from infercrane.domain.capacity.service import CapacityService


__getattr__, __dir__ = exports(__name__, _HOME, globals())


__all__ = [
    "AGGREGATE_BATCH", "DAY_HOURS", "DAY_ROLLUPS_BEYOND_HOURS", "EXACT_IN_REPORT", "EXACT_PER_DAY",
    "EXACT_PER_HOUR", "GROUP_DIMENSIONS", "HOUR_MS", "MAX_BATCH", "MAX_START_SKEW", "MAX_START_SKEW_MS",
    "MIN_N_P50", "MIN_N_P95", "PERCENTILE_METHOD_EXACT", "PERCENTILE_METHOD_SKETCH",
    "RELATIVE_ACCURACY", "SCOPE_NOTE", "TAIL_READERS", "AggregateResult", "Aggregator",
    "AttemptIn", "CapacityService", "DayDurations", "DayRollup", "DirtyMark", "DurationMerge",
    "DurationSummary", "GroupKey", "GroupMerge", "GroupStats", "HourRollup", "IngestResult",
    "ItemError", "Outcome", "ReadCost", "StoredAttempt", "batch_of", "build_report",
    "classify_attempt", "day_from_key", "day_key", "day_of", "group_document", "hour_from_key",
    "hour_key", "hour_of", "new_token", "parse_group_by", "parse_hours", "validate_attempt",
]
