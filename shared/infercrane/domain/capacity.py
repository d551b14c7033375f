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
"""

from __future__ import annotations

import binascii
import json
import logging
import math
import operator
import sys
import uuid
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Literal

from ddsketch.mapping import LogarithmicMapping
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from infercrane.domain import classifier as _classifier
from infercrane.domain.uncertainty import (
    CONFIDENCE,
    MIN_N_RATE,
    STRENGTH_ORDER,
    STRENGTH_RULE,
    strength,
    wilson_interval,
)
from infercrane.domain.validation import (
    ID_PATTERN,
    NAME_PATTERN,
    SHORT_NAME_PATTERN,
    TENANT_RE,
    TIME_RANGE_SENTENCE,
    StorableText,
    closed_envelope,
    error_location,
    fixed_sentence,
    within_bounds,
)
from infercrane.domain.validation import MAX_FUTURE as DEFAULT_MAX_FUTURE
from infercrane.domain.windows import epoch_ms, from_epoch_ms, parse_window
from infercrane.errors import DependencyUnavailable, InvalidInput, PayloadTooLarge

if TYPE_CHECKING:
    from infercrane.ports.capacity import CapacityStore

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
MAX_BATCH = 500
GROUP_DIMENSIONS = ("adapter", "runtime", "compute_mode", "region", "gpu")
Outcome = Literal["succeeded", "failed", "cancelled"]

# Duration summaries. DDSketch's relative-error guarantee: every reported quantile q is within
# RELATIVE_ACCURACY of the true value at the same rank (|estimate - x| <= alpha * x).
RELATIVE_ACCURACY = 0.01
AGGREGATE_BATCH = 100  # tenant-hours rolled up, written and cleared together
EXACT_PER_HOUR = 64  # a group-hour keeps exact values up to this many, a sketch beyond
EXACT_IN_REPORT = 500  # a report group answers exactly while all its parts are exact and n <= this
EXACT_PER_DAY = 64  # a day rollup keeps a group-day's exact values up to this many, a sketch beyond
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
MAX_FUTURE_MS = 5 * 60_000  # clock skew tolerated on started_at
MAX_FUTURE = timedelta(milliseconds=MAX_FUTURE_MS)

_MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)


def hour_of(ms: int) -> int:
    return ms // HOUR_MS


def hour_key(hour: int) -> str:
    """`2026-11-29T20`: sorts in time order, readable in the console."""
    return datetime.fromtimestamp(hour * 3600, UTC).strftime("%Y-%m-%dT%H")


def hour_from_key(key: str) -> int:
    return int(datetime.strptime(key, "%Y-%m-%dT%H").replace(tzinfo=UTC).timestamp()) // 3600


def _rfc(ms: int) -> str:
    dt = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# ---------------------------------------------------------------------------- the attempt
_NAME = SHORT_NAME_PATTERN  # also safe inside keys: no '#' and no '|'


class AttemptIn(BaseModel):
    """One lifecycle attempt as submitted (HTTP, EventBridge, JSONL import)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    attempt_id: str = Field(pattern=ID_PATTERN)
    deployment: str = Field(pattern=NAME_PATTERN)
    operation: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    adapter: Literal["aws", "gcp", "kubernetes"]
    runtime: str = Field(pattern=_NAME)
    compute_mode: str = Field(pattern=_NAME)
    region: str = Field(pattern=_NAME)
    zone: str | None = Field(default=None, pattern=_NAME)
    gpu: str = Field(pattern=_NAME)
    gpu_count: int = Field(ge=0, le=4096)
    started_at: AwareDatetime
    finished_at: AwareDatetime | None = None
    outcome: Outcome
    # The provider's code is an identifier (`InsufficientInstanceCapacity`, `QUOTA_EXCEEDED`,
    # `scale.up.error.out.of.resources`, `8`); its message is the one free text the service keeps.
    error_code: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
    error_message: StorableText | None = Field(default=None, max_length=4096)


@dataclass(frozen=True)
class StoredAttempt:
    tenant: str
    attempt_id: str
    deployment: str
    operation: str
    adapter: str
    runtime: str
    compute_mode: str
    region: str
    zone: str | None
    gpu: str
    gpu_count: int
    started_at_ms: int
    finished_at_ms: int | None
    outcome: str
    error_code: str | None
    error_message: str | None
    received_at_ms: int
    # Derived from (adapter, error_code, error_message) by `classifier_version`; None unless failed.
    failure_class: str | None
    persistent: bool
    rule: str | None
    classifier_version: str

    @property
    def hour(self) -> int:
        return hour_of(self.started_at_ms)

    @property
    def group(self) -> tuple[str, str, str, str, str]:
        return (self.adapter, self.runtime, self.compute_mode, self.region, self.gpu)

    @property
    def duration_ms(self) -> int | None:
        """Operation duration of a finished attempt; cancelled ones say nothing about duration."""
        if self.finished_at_ms is None or self.outcome == "cancelled":
            return None
        return self.finished_at_ms - self.started_at_ms


def classify_attempt(attempt: StoredAttempt, classify: Callable[..., Any],
                     version: str) -> StoredAttempt:
    if attempt.outcome != "failed":
        return replace(attempt, failure_class=None, persistent=False, rule=None,
                       classifier_version=version)
    c = classify(attempt.adapter, attempt.error_code, attempt.error_message)
    return replace(attempt, failure_class=c.failure_class, persistent=c.persistent, rule=c.rule,
                   classifier_version=version)


@dataclass(frozen=True)
class ItemError:
    index: int
    field: str | None
    code: str
    message: str

    def to_doc(self) -> dict[str, Any]:
        return {"index": self.index, "field": self.field, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    rejected: int
    errors: list[ItemError]
    new: int = 0  # accepted items that were not stored before (re-sends change nothing)

    def to_doc(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rejected": self.rejected,
                "errors": [e.to_doc() for e in self.errors]}


def validate_attempt(tenant: str, index: int, raw: Any, now_ms: int, classify: Callable[..., Any],
                     version: str) -> StoredAttempt | ItemError:
    if not isinstance(raw, Mapping):
        return ItemError(index, None, "invalid_input", "Each attempt must be an object.")
    try:
        item = AttemptIn.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        return ItemError(index, error_location(first), "invalid_input",
                         fixed_sentence(str(first.get("type"))))
    now = from_epoch_ms(now_ms)
    # started_at may run ahead of our clock by the skew; finished_at by the default day.
    for name, future in (("started_at", MAX_FUTURE), ("finished_at", DEFAULT_MAX_FUTURE)):
        moment = getattr(item, name)
        if moment is not None and not within_bounds(moment, now, future):
            return ItemError(index, name, "invalid_input", TIME_RANGE_SENTENCE)
    started = epoch_ms(item.started_at)
    finished = epoch_ms(item.finished_at) if item.finished_at is not None else None
    if finished is not None and finished < started:
        return ItemError(index, "finished_at", "invalid_input", "Must not be before started_at.")
    if item.outcome == "succeeded" and finished is None:
        return ItemError(index, "finished_at", "invalid_input",
                         "A succeeded attempt needs finished_at.")
    stored = StoredAttempt(
        tenant=tenant, attempt_id=item.attempt_id, deployment=item.deployment,
        operation=item.operation, adapter=item.adapter, runtime=item.runtime,
        compute_mode=item.compute_mode, region=item.region, zone=item.zone, gpu=item.gpu,
        gpu_count=item.gpu_count, started_at_ms=started, finished_at_ms=finished,
        outcome=item.outcome, error_code=item.error_code, error_message=item.error_message,
        received_at_ms=now_ms, failure_class=None, persistent=False, rule=None,
        classifier_version=version)
    return classify_attempt(stored, classify, version)


_ENVELOPE = frozenset({"items"})


def batch_of(body: Any) -> list[Any]:
    """The attempts of a batch document `{"items": [...]}` (HTTP body, EventBridge detail)."""
    closed_envelope(body, _ENVELOPE, "The body must be an object with an items list.")
    items = body.get("items")
    if not isinstance(items, list):
        raise InvalidInput("items must be a list of lifecycle attempts.", field="items")
    return items


# ---------------------------------------------------------------------------- durations
@dataclass
class DurationSummary:
    """A mergeable summary of durations in milliseconds.

    Exact (`values`) while small; otherwise a DDSketch: counts per logarithmic bucket of
    `ddsketch.mapping.LogarithmicMapping(RELATIVE_ACCURACY)` (the mapping `ddsketch.DDSketch`
    uses), plus a zero bucket. Summaries are merged by `DurationMerge`, which adds bucket counts,
    so merging is exact and order-independent.
    An exact summary also carries the bucket key of each positive value (`keys`, computed once
    when the value is added and stored with the rollup), so turning thousands of exact values
    into a sketch when a report merges them is a count of keys, not a logarithm per value.
    """

    values: list[int] | None = field(default_factory=list)
    bins: dict[int, int] = field(default_factory=dict)
    zero: int = 0
    n: int = 0
    min: int | None = None
    max: int | None = None
    keys: list[int] | None = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.values is not None

    def add(self, ms: int) -> None:
        self.n += 1
        self.min = ms if self.min is None else min(self.min, ms)
        self.max = ms if self.max is None else max(self.max, ms)
        if self.values is not None and self.keys is not None:
            self.values.append(ms)
            if ms > 0:
                self.keys.append(_MAPPING.key(ms))
        else:
            self._bin(ms, 1)

    def _bin(self, ms: float, count: int) -> None:
        if ms <= 0:
            self.zero += count
        else:
            key = _MAPPING.key(ms)
            self.bins[key] = self.bins.get(key, 0) + count

    def _bin_exact(self, values: list[int], keys: list[int]) -> None:
        """Count exact values into the buckets: `keys` are their positive values' bucket keys,
        the rest (zero or negative) go to the zero bucket."""
        for key, count in Counter(keys).items():
            self.bins[key] = self.bins.get(key, 0) + count
        self.zero += len(values) - len(keys)

    def to_sketch(self) -> None:
        if self.values is not None:
            self._bin_exact(self.values, self.keys or [])
            self.values = self.keys = None

    def compact(self, exact_limit: int) -> DurationSummary:
        if self.values is not None and len(self.values) > exact_limit:
            self.to_sketch()
        return self

    def quantile_ms(self, q: float) -> float | None:
        if self.n == 0:
            return None
        rank = math.floor(q * (self.n - 1))
        if self.values is not None:
            return float(sorted(self.values)[rank])
        if rank < self.zero:
            return 0.0
        keys = sorted(self.bins)
        # cumulative[j]: values at or below bucket keys[j - 1]; the rank's bucket is the first
        # whose cumulative count passes the rank.
        cumulative = list(accumulate(map(self.bins.__getitem__, keys), initial=self.zero))
        j = bisect_right(cumulative, rank)
        if j > len(keys):
            return float(self.max or 0)
        value = _MAPPING.value(keys[j - 1])
        return float(min(max(value, self.min or 0), self.max or value))

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"n": self.n, "min": self.min, "max": self.max}
        if self.values is not None:
            doc["v"] = sorted(self.values)
            doc["k"] = sorted(self.keys or [])
        else:
            doc["b"] = [[k, c] for k, c in sorted(self.bins.items())]
            doc["z"] = self.zero
            doc["a"] = RELATIVE_ACCURACY
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> DurationSummary:
        if "v" in doc:
            values = list(map(int, doc["v"]))
            # Rollups written before keys were stored: computed here, once.
            keys = (list(map(int, doc["k"])) if "k" in doc
                    else [_MAPPING.key(v) for v in values if v > 0])
            return cls(values=values, n=int(doc["n"]), min=doc.get("min"), max=doc.get("max"),
                       keys=keys)
        if float(doc.get("a", RELATIVE_ACCURACY)) != RELATIVE_ACCURACY:
            # Sketches of another accuracy do not merge; the aggregator rewrites them.
            raise ValueError("duration sketch of another relative accuracy")
        return cls(values=None, bins={int(k): int(c) for k, c in doc["b"]}, zero=int(doc["z"]),
                   n=int(doc["n"]), min=doc.get("min"), max=doc.get("max"))


# ---------------------------------------------------------------------------- rollups
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

    def to_doc(self) -> dict[str, Any]:
        return {"s": self.samples, "ok": self.succeeded, "f": self.failed, "c": self.cancelled,
                "fc": dict(sorted(self.failures.items())), "cs": self.capacity_structural,
                "d": self.durations.to_doc()}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> GroupStats:
        return cls(int(doc["s"]), int(doc["ok"]), int(doc["f"]), int(doc["c"]),
                   {str(k): int(v) for k, v in doc["fc"].items()}, int(doc["cs"]),
                   DurationSummary.from_doc(doc["d"]))


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
        return [{"k": list(k), **g.to_doc()} for k, g in sorted(self.groups.items())]

    @classmethod
    def from_group_docs(cls, tenant: str, hour: int, version: str,
                        docs: Iterable[Mapping[str, Any]], token: str | None = None) -> HourRollup:
        rollup = cls(tenant, hour, version, token=token)
        for d in docs:
            rollup.groups[tuple(d["k"])] = GroupStats.from_doc(d)
        rollup.attempts = sum(g.samples for g in rollup.groups.values())
        return rollup


# ---------------------------------------------------------------------------- day rollups
# A closed UTC day of a tenant is compacted into one day rollup (its hour rollups merged), so a
# 720 h report reads 30 day items instead of 720 hour items. Each group of a day stores:
# - the exact values, as the text `1,2,3`, while the group-day has at most EXACT_PER_DAY of them
#   (as an hour keeps up to EXACT_PER_HOUR): decoded, all days in one JSON decode, only for a
#   group the report answers exactly. Beyond, the day part is a sketch, so the bytes of a group-day
#   stop growing with its attempts;
# - a dense DDSketch: the bucket counts from key `lo` up, packed little-endian in base64, decoded
#   only for a group the report answers with the sketch.
DAY_HOURS = 24


def day_of(hour: int) -> int:
    return hour // DAY_HOURS


def day_key(day: int) -> str:
    """`2026-11-29`: sorts in time order."""
    return datetime.fromtimestamp(day * 86400, UTC).strftime("%Y-%m-%d")


def day_from_key(key: str) -> int:
    return int(datetime.strptime(key, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()) // 86400


def _pack_counts(counts: Sequence[int]) -> str:
    """Bucket counts as `<width><base64>`: each count little-endian in the fewest bytes (1, 2, 4
    or 8) that hold the largest."""
    width = next(w for w in (1, 2, 4, 8) if max(counts, default=0) < 1 << (8 * w))
    raw = b"".join(c.to_bytes(width, "little") for c in counts)
    return str(width) + binascii.b2a_base64(raw, newline=False).decode("ascii")


_LANE_TYPES = {2: "H", 4: "I", 8: "Q"}  # lane bytes -> the array typecode of that size
if any(array(code).itemsize != size for size, code in _LANE_TYPES.items()):
    raise ImportError("this platform's array typecodes H/I/Q are not 2/4/8 bytes")


def _lanes(text: str, lane: int) -> tuple[int, int]:
    """(`_pack_counts` text as one integer with a `lane`-byte lane a bucket, number of
    buckets)."""
    width = int(text[0])
    raw = binascii.a2b_base64(text[1:])
    size = len(raw) // width
    if width > lane:
        raise ValueError("bucket counts wider than the lanes that add them")
    wide = bytearray(lane * size)
    for j in range(width):  # byte j of every count into byte j of its lane: C-level slices
        wide[j::lane] = raw[j::width]
    return int.from_bytes(wide, "little"), size


@dataclass
class DayDurations:
    """A group-day's durations as stored in a day rollup (see the section comment)."""

    n: int
    min: int | None
    max: int | None
    values_text: str | None  # `1,2,3`: the exact values, or None beyond EXACT_PER_DAY
    lo: int  # the bucket key of `counts[0]`
    counts: str  # `_pack_counts` of the dense bucket counts
    zero: int

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"n": self.n, "min": self.min, "max": self.max, "lo": self.lo,
                               "b": self.counts, "z": self.zero, "a": RELATIVE_ACCURACY}
        if self.values_text is not None:
            doc["v"] = self.values_text
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> DayDurations:
        if float(doc["a"]) != RELATIVE_ACCURACY:
            raise ValueError("duration sketch of another relative accuracy")
        return cls(int(doc["n"]), doc.get("min"), doc.get("max"), doc.get("v"), int(doc["lo"]),
                   str(doc["b"]), int(doc["z"]))


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
            keys = d.keys if d.keys is not None else [_MAPPING.key(v) for v in d.values if v > 0]
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
        lane = next(w for w in _LANE_TYPES if self.n < 1 << (8 * w))
        dense = [(start, *_lanes(text, lane)) for start, text in self._dense]
        if not dense and not bins:
            return 0, [], zero
        lo = min([start for start, _, _ in dense] + list(bins))
        hi = max([start + size for start, _, size in dense] + [k + 1 for k in bins])
        total = 0
        for start, lanes, _ in dense:
            total += lanes << (8 * lane * (start - lo))
        summed = array(_LANE_TYPES[lane], total.to_bytes(lane * (hi - lo), "little"))
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
        return DayDurations(self.n, self.min, self.max, text, lo, _pack_counts(counts), zero)


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

    @property
    def attempts(self) -> int:
        return sum(row[0] for row, _ in self.groups.values())

    def group_docs(self) -> list[dict[str, Any]]:
        return [{"k": list(k), "c": row, "d": d.to_doc()} for k, (row, d) in self.groups.items()]

    @classmethod
    def from_group_docs(cls, tenant: str, day: int, version: str,
                        docs: Iterable[Mapping[str, Any]]) -> DayRollup:
        rollup = cls(tenant, day, version)
        for d in docs:
            rollup.groups[tuple(d["k"])] = (d["c"], DayDurations.from_doc(d["d"]))
        return rollup


# ---------------------------------------------------------------------------- report
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


# ---------------------------------------------------------------------------- the service
@dataclass(frozen=True)
class AggregateResult:
    hours: int
    attempts: int
    reclassified: int
    stale_marked: int
    still_dirty: int
    days: int = 0  # day rollups compacted
    awaiting_day_close: int = 0  # hours rolled up whose day is still open

    def to_doc(self) -> dict[str, int]:
        return self.__dict__.copy()


class CapacityService:
    def __init__(self, store: CapacityStore, *, classify: Callable[..., Any] = _classifier.classify,
                 version: str = _classifier.CLASSIFIER_VERSION,
                 previous_versions: Sequence[str] = _classifier.PREVIOUS_VERSIONS,
                 settle_ms: int = 0):
        self.store = store
        self.classify = classify
        self.version = version
        self.previous_versions = [v for v in previous_versions if v != version]
        # A dirty mark is cleared only once it is this old, so index propagation has settled.
        self.settle_ms = settle_ms

    # -- ingest ---------------------------------------------------------------------------------
    def ingest(self, tenant: str, items: Any, now: datetime) -> IngestResult:
        """Validate and store a batch. Re-sending an attempt id is accepted and changes nothing."""
        if not isinstance(items, list):
            raise InvalidInput("items must be a list of lifecycle attempts.", field="items")
        if len(items) > MAX_BATCH:
            raise PayloadTooLarge(f"A batch holds at most {MAX_BATCH} attempts.", field="items")
        now_ms = epoch_ms(now)
        errors: list[ItemError] = []
        valid: dict[str, StoredAttempt] = {}
        accepted = 0
        for i, raw in enumerate(items):
            result = validate_attempt(tenant, i, raw, now_ms, self.classify, self.version)
            if isinstance(result, ItemError):
                errors.append(result)
                continue
            accepted += 1
            valid.setdefault(result.attempt_id, result)  # first occurrence in a batch wins
        existing = self.store.existing_attempt_ids(tenant, list(valid)) if valid else set()
        new = [a for a in valid.values() if a.attempt_id not in existing]
        # Every valid item re-marks its hour, so a retried request heals a marker lost to a crash;
        # marked even when the store refuses one attempt's content (a 422 raised after the others
        # were written), or those others would never be rolled up.
        hours = {a.hour for a in valid.values()}
        try:
            # Counted by the store: a concurrent request may have stored some of them meanwhile.
            stored = self.store.put_attempts(new) if new else 0
        finally:
            if hours:
                self.store.mark_dirty(tenant, sorted(hours), now_ms)
        return IngestResult(accepted, len(errors), errors, new=stored)

    def ingest_event(self, event: Mapping[str, Any], now: datetime,
                     tenant_exists: Callable[[str], bool]) -> dict[str, Any]:
        """An EventBridge event from ControlPlaneBus: detail `{"tenant": T, "items": [...]}`.

        The bus's resource policy is the trust boundary: only the control plane's producers may
        put events there, so the tenant named in the detail is taken as stated (and must exist).
        Only a fully valid event may raise (and so be retried by EventBridge and end in
        LifecycleEventsDLQ): every content check runs before anything that can fail transiently,
        a malformed event is dropped and counted, and an event with any invalid item is never
        retried (its valid items are stored if the store is up, else it is dropped and counted)."""
        drop: dict[str, Any] = {"accepted": 0, "rejected": 0, "dropped": 1}
        try:
            detail = event.get("detail")
            if not isinstance(detail, Mapping):
                detail = {}
            tenant = detail.get("tenant")
            if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
                return {**drop, "reason": "unknown_tenant"}
            items = batch_of({k: v for k, v in detail.items() if k != "tenant"})
            if len(items) > MAX_BATCH:
                raise PayloadTooLarge(f"A batch holds at most {MAX_BATCH} attempts.", field="items")
            now_ms = epoch_ms(now)
            clean = all(not isinstance(validate_attempt(tenant, i, raw, now_ms, self.classify,
                                                        self.version), ItemError)
                        for i, raw in enumerate(items))
        except (InvalidInput, PayloadTooLarge) as exc:
            return {**drop, "reason": exc.code, "field": exc.field}
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("lifecycle event dropped unread: %s", type(exc).__name__)
            return {**drop, "reason": "unreadable"}
        try:
            if not tenant_exists(tenant):
                return {**drop, "reason": "unknown_tenant"}
            result = self.ingest(tenant, items, now)
        except DependencyUnavailable:
            if clean:
                raise
            log.warning("lifecycle event with invalid items dropped: the store is unavailable")
            return {**drop, "reason": "dependency_unavailable"}
        doc = result.to_doc()
        return {"accepted": doc["accepted"], "rejected": doc["rejected"], "dropped": 0,
                "errors": [{k: e[k] for k in ("index", "field", "code")} for e in doc["errors"]]}

    # -- aggregate ------------------------------------------------------------------------------
    def aggregate(self, now: datetime, max_hours: int = 5000,
                  time_left_ms: Callable[[], int] | None = None) -> AggregateResult:
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
                    rollup, changed = self._recompute(mark.tenant, mark.hour)
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

    def _recompute(self, tenant: str, hour: int) -> tuple[HourRollup, list[StoredAttempt]]:
        fresh: list[StoredAttempt] = []
        changed: list[StoredAttempt] = []
        for stored in self.store.attempts_in_hour(tenant, hour):
            a = stored
            if a.classifier_version != self.version:
                a = classify_attempt(a, self.classify, self.version)
                changed.append(a)
            fresh.append(a)
        return HourRollup.build(tenant, hour, fresh, self.version), changed

    # -- report ---------------------------------------------------------------------------------
    def report(self, tenant: str, window: str, until: datetime | None, group_by: str | None,
               now: datetime) -> dict[str, Any]:
        hours = parse_hours(window)
        dims = parse_group_by(group_by)
        end_ms = epoch_ms(until if until is not None else now)
        end_hour = -(-end_ms // HOUR_MS)  # the hour holding `until` is included
        start_hour = end_hour - hours
        cost = ReadCost()
        marks = self.store.dirty_hours(tenant, start_hour, end_hour)
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
            for day_rollup in self.store.day_rollups(tenant, first_day, end_day):
                cost.rollup_items += 1
                cost.day_items += 1
                if (day_rollup.day in marked_days
                        or day_rollup.classifier_version != self.version):
                    continue
                covered.add(day_rollup.day)
                for key, (row, d) in day_rollup.groups.items():
                    group(key).add_day(row, d)
        stale: set[int] = set()
        for lo, hi in _uncovered_runs(start_hour, end_hour, covered):
            for rollup in self.store.rollups(tenant, lo, hi):
                cost.rollup_items += 1
                if rollup.hour in dirty:
                    continue
                if rollup.classifier_version != self.version:
                    stale.add(rollup.hour)
                    continue
                fold(rollup)
        # The tail is one Query per hour not yet rolled up (a first report after a large import
        # reads hundreds): they run side by side, as the round trips dominate, and fold in order.
        from concurrent.futures import ThreadPoolExecutor  # only a report with a tail needs it

        tail = sorted(dirty | stale)
        with ThreadPoolExecutor(max_workers=TAIL_READERS) as readers:
            for rollup, _ in readers.map(lambda hour: self._recompute(tenant, hour), tail):
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
            "window": {"duration": window, "hours": hours, "start": _rfc(start_hour * HOUR_MS),
                       "end": _rfc(end_hour * HOUR_MS), "alignment": "whole hours of started_at"},
            "scope": "tenant-observed",
            "note": SCOPE_NOTE,
            "group_by": list(dims),
            "classifier_version": self.version,
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


def _day_end_ms(day: int) -> int:
    return (day + 1) * DAY_HOURS * HOUR_MS


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


def _skipped(mark: DirtyMark, exc: Exception) -> None:
    log.warning("aggregate: tenant %s hour %d skipped: %s", mark.tenant, mark.hour,
                type(exc).__name__)


def new_token() -> str:
    return uuid.uuid4().hex

