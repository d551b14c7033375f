"""Summary statistics of a trace's records (the `statistics` object of the trace schema).

Percentiles use the nearest-rank method: the value at rank ceil(p/100 * n) of the sorted values, so
every percentile is a value that was actually observed and no interpolation choice can make two
builds disagree. Means are the exact quotient sum / n (sums of integers are exact).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import add, eq, itemgetter, sub
from typing import Any

PERCENTILE_METHOD = "nearest-rank"


def nearest_rank(sorted_values: Sequence[float], p: int) -> float | None:
    """The p-th percentile (1..100) of already sorted values; None when there are none."""
    n = len(sorted_values)
    if n == 0:
        return None
    rank = max(1, -(-p * n // 100))  # ceil(p * n / 100) in integer arithmetic
    return sorted_values[rank - 1]


def token_summary(values: Sequence[int]) -> dict[str, Any]:
    ordered = sorted(values)
    if not ordered:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    return {"mean": sum(ordered) / len(ordered), "p50": nearest_rank(ordered, 50),
            "p95": nearest_rank(ordered, 95), "max": ordered[-1]}


def time_summary(values: Iterable[float | None]) -> dict[str, Any]:
    ordered = sorted(v for v in values if v is not None)
    return {"p50": nearest_rank(ordered, 50), "p95": nearest_rank(ordered, 95)}


def peak_concurrency(intervals: Iterable[tuple[float, float]]) -> int:
    """Most requests in flight at once, from (arrival, latency) pairs.

    A request occupies [arrival, arrival + latency). At equal times an end frees its slot before an
    arrival takes one, so back-to-back requests never count as overlapping. A zero-latency request
    still counts at its instant (its own end comes after every arrival at that time).
    """
    pairs = list(intervals)
    return _peak([a for a, _ in pairs], [lat for _, lat in pairs])


def _peak(arrivals: Sequence[float], latencies: Sequence[float]) -> int:
    """`peak_concurrency` of columns. The count only grows at an arrival, so the peak is the
    largest count just after one: arrivals so far (by rank in arrival order) minus the ends
    before it, those at or before its time, but a zero-length request's (end == arrival) only
    strictly before: three sorts of numbers and C-level bisects, no per-event tuples."""
    # `lat < 0.0` is false for NaN and -0.0: the end is `arrival + max(lat, 0.0)` exactly.
    ends = [a + (0.0 if lat < 0.0 else lat) for a, lat in zip(arrivals, latencies, strict=True)]
    zero = list(map(eq, ends, arrivals))
    if any(zero):
        lasting = sorted(e for e, z in zip(ends, zero, strict=True) if not z)
        instant = sorted(e for e, z in zip(ends, zero, strict=True) if z)
    else:
        lasting, instant = sorted(ends), []
    ordered = _as_floats(sorted(arrivals))
    ended = map(bisect_right, repeat(_as_floats(lasting)), ordered)
    if instant:
        ended = map(add, ended, map(bisect_left, repeat(_as_floats(instant)), ordered))
    return max(map(sub, range(1, len(ordered) + 1), ended), default=0)


def _as_floats(ordered: list[Any]) -> list[Any]:
    """Sorted ints and floats as floats when every one is exactly a float (|x| <= 2**53): they
    compare as before, and float to float compares at twice the speed of int to float."""
    if not ordered or max(abs(ordered[0]), abs(ordered[-1])) > 2**53:
        return ordered
    types = set(map(type, ordered))
    return list(map(float, ordered)) if types <= {int, float} and types != {float} else ordered


def block_repeat_ratio(block_lists: Iterable[Sequence[str] | None]) -> float | None:
    """Share of prefix blocks (in trace order) whose identity appeared earlier in the trace.

    Not AIPerf `analyze-trace`'s `prefix_reuse_ratio` (reused prefix *paths* over all prefix
    paths), hence its own name: on the same Mooncake file the two differ (0.3664 vs 0.5194)."""
    seen: set[str] = set()
    total = reused = 0
    for blocks in block_lists:
        for block in blocks or ():
            total += 1
            if block in seen:
                reused += 1
            else:
                seen.add(block)
    return reused / total if total else None


def request_rate_per_s(count: int, span_ms: int | None) -> float | None:
    """Requests ÷ their arrival span: a rate over what was observed, never over an empty stretch
    of window. None when it is undefined (fewer than two arrivals, or all at one instant)."""
    if count < 2 or not span_ms:
        return None
    return count * 1000 / span_ms


# The record fields the statistics read.
STATISTICS_FIELDS = ("offset_ms", "input_tokens", "output_tokens", "ttft_ms", "latency_ms",
                     "session_id", "prefix_block_ids")


def compute_statistics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Statistics of trace records (dicts with the trace schema's record fields).

    The request rate is requests ÷ arrival span (first to last arrival); the window, which may
    hold stretches without traffic, is reported separately by the trace.
    """
    return statistics_of(_columns_of(records))


def _columns_of(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The records' `STATISTICS_FIELDS` as columns: the required ones by key (KeyError when one
    is missing), the others None where a record has none."""
    required = ("offset_ms", "input_tokens", "output_tokens")
    return {name: list(map(itemgetter(name), records)) if name in required
            else [r.get(name) for r in records] for name in STATISTICS_FIELDS}


def statistics_of(columns: Mapping[str, list[Any]]) -> dict[str, Any]:
    """`compute_statistics` of records given as columns (`STATISTICS_FIELDS`, one list each,
    None where a record has no value): a build that holds its records' columns already reads
    each field once."""
    offsets, latencies = columns["offset_ms"], columns["latency_ms"]
    n = len(offsets)
    span = int(max(offsets)) - int(min(offsets)) if n else None  # int() keeps the order
    if None in latencies:
        timed = [(o, lat) for o, lat in zip(offsets, latencies, strict=True) if lat is not None]
        peak = _peak([o for o, _ in timed], [lat for _, lat in timed])
    else:
        peak = _peak(offsets, latencies)
    return _statistics(n, span, list(map(int, columns["input_tokens"])),
                       list(map(int, columns["output_tokens"])), columns["ttft_ms"], latencies,
                       peak, len(set(columns["session_id"]) - {None}),
                       block_repeat_ratio(columns["prefix_block_ids"]))


def _statistics(n: int, span: int | None, inputs: list[int], outputs: list[int],
                ttfts: Iterable[float | None], latencies: Iterable[float | None], peak: int,
                sessions: int, block_ratio: float | None) -> dict[str, Any]:
    """The statistics object of the trace schema, from what either way of counting found (all
    records at once, `statistics_of`; a batch at a time, `StatisticsAccumulator`)."""
    return {
        "request_count": n,
        "arrival_span_ms": span,
        "request_rate_per_s": request_rate_per_s(n, span),
        "input_tokens": token_summary(inputs),
        "output_tokens": token_summary(outputs),
        "ttft_ms": time_summary(ttfts),
        "latency_ms": time_summary(latencies),
        "peak_concurrency": peak,
        "sessions": sessions,
        "block_repeat_ratio": block_ratio,
        "percentile_method": PERCENTILE_METHOD,
    }


def _extend_ints(target: array[int], values: Sequence[Any]) -> None:
    """`target.extend(map(int, values))`, without an int() a value when they are ints already
    (a trace's records hold them so: three such passes over every batch of a build)."""
    size = len(target)
    try:
        target.extend(values)  # ints (and bools) as they are; a float or Decimal is refused
    except TypeError:
        del target[size:]  # what was appended before the refused value
        target.extend(map(int, values))


class StatisticsAccumulator:
    """`compute_statistics` in one pass over records given in trace order (in batches), for
    builds that never hold the records: each record leaves only its numbers (compact arrays, ~40
    bytes a record), its session and its new prefix blocks. The result is the same dict, value
    for value."""

    def __init__(self) -> None:
        self._inputs = array("q")
        self._outputs = array("q")
        self._ttfts = array("d")
        self._latencies = array("d")
        self._timed_offsets = array("q")  # offsets of records with a latency, for concurrency
        self._sessions: set[str | None] = set()
        self._blocks: set[str] = set()
        self._block_total = self._block_reused = 0
        self._first_offset: int | None = None
        self._last_offset: int | None = None

    def extend(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Add `records` (the next ones in trace order), a batch at a time: each field is read
        with C-level loops, as `compute_statistics` reads them."""
        self.extend_columns(_columns_of(records))

    def extend_columns(self, columns: Mapping[str, Sequence[Any]]) -> None:
        """`extend` with the next records given as columns (`STATISTICS_FIELDS`, as
        `statistics_of` takes them), for a build that holds them so already."""
        if not columns["offset_ms"]:
            return
        offsets = columns["offset_ms"]
        first, last = int(min(offsets)), int(max(offsets))  # int() keeps the order
        self._first_offset = first if self._first_offset is None else min(self._first_offset, first)
        self._last_offset = last if self._last_offset is None else max(self._last_offset, last)
        _extend_ints(self._inputs, columns["input_tokens"])
        _extend_ints(self._outputs, columns["output_tokens"])
        ttfts = columns["ttft_ms"]
        self._ttfts.extend([v for v in ttfts if v is not None] if None in ttfts else ttfts)
        latencies = columns["latency_ms"]
        if None in latencies:
            self._latencies.extend([v for v in latencies if v is not None])
            _extend_ints(self._timed_offsets, [
                o for o, latency in zip(offsets, latencies, strict=True) if latency is not None])
        else:
            self._latencies.extend(latencies)
            _extend_ints(self._timed_offsets, offsets)
        self._sessions.update(columns["session_id"])
        self._sessions.discard(None)
        for blocks in filter(None, columns["prefix_block_ids"]):
            for block in blocks:
                self._block_total += 1
                if block in self._blocks:
                    self._block_reused += 1
                else:
                    self._blocks.add(block)

    def result(self) -> dict[str, Any]:
        n = len(self._inputs)
        span = (None if self._first_offset is None or self._last_offset is None
                else self._last_offset - self._first_offset)
        latencies = self._latencies.tolist()
        return _statistics(n, span, self._inputs.tolist(), self._outputs.tolist(),
                           self._ttfts.tolist(), latencies,
                           _peak(self._timed_offsets.tolist(), latencies), len(self._sessions),
                           self._block_reused / self._block_total if self._block_total else None)
