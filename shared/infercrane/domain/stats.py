"""Summary statistics of a trace's records (the `statistics` object of the trace schema).

Percentiles use the nearest-rank method: the value at rank ceil(p/100 * n) of the sorted values, so
every percentile is a value that was actually observed and no interpolation choice can make two
builds disagree. Means are the exact quotient sum / n (sums of integers are exact).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
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
    """Most requests in flight at once, from (arrival, latency) pairs, by a sweep line.

    A request occupies [arrival, arrival + latency). At equal times an end frees its slot before an
    arrival takes one, so back-to-back requests never count as overlapping. A zero-latency request
    still counts at its instant (its own end sorts after every arrival at that time).
    """
    events: list[tuple[float, int]] = []
    for arrival, latency in intervals:
        end = arrival + max(latency, 0.0)
        events.append((arrival, 1))
        # kind 0: end before arrivals at the same time; kind 2: a zero-length request's own end.
        events.append((end, 2 if end == arrival else 0))
    events.sort()
    current = peak = 0
    for _, kind in events:
        if kind == 1:
            current += 1
            peak = max(peak, current)
        else:
            current -= 1
    return peak


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


def arrival_span_ms(records: Sequence[Mapping[str, Any]]) -> int | None:
    """Last arrival minus first arrival; None without records."""
    if not records:
        return None
    offsets = [int(r["offset_ms"]) for r in records]
    return max(offsets) - min(offsets)


def request_rate_per_s(count: int, span_ms: int | None) -> float | None:
    """Requests ÷ their arrival span: a rate over what was observed, never over an empty stretch
    of window. None when it is undefined (fewer than two arrivals, or all at one instant)."""
    if count < 2 or not span_ms:
        return None
    return count * 1000 / span_ms


def compute_statistics(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Statistics of trace records (dicts with the trace schema's record fields).

    The request rate is requests ÷ arrival span (first to last arrival); the window, which may
    hold stretches without traffic, is reported separately by the trace.
    """
    n = len(records)
    sessions = {r["session_id"] for r in records if r.get("session_id") is not None}
    span = arrival_span_ms(records)
    return {
        "request_count": n,
        "arrival_span_ms": span,
        "request_rate_per_s": request_rate_per_s(n, span),
        "input_tokens": token_summary([int(r["input_tokens"]) for r in records]),
        "output_tokens": token_summary([int(r["output_tokens"]) for r in records]),
        "ttft_ms": time_summary(r.get("ttft_ms") for r in records),
        "latency_ms": time_summary(r.get("latency_ms") for r in records),
        "peak_concurrency": peak_concurrency(
            (r["offset_ms"], r["latency_ms"]) for r in records if r.get("latency_ms") is not None),
        "sessions": len(sessions),
        "block_repeat_ratio": block_repeat_ratio(r.get("prefix_block_ids") for r in records),
        "percentile_method": PERCENTILE_METHOD,
    }


class StatisticsAccumulator:
    """`compute_statistics` in one pass over records given in trace order, for builds that never
    hold the records: each record leaves only its numbers (compact arrays, ~40 bytes a record),
    its session and its new prefix blocks. The result is the same dict, value for value."""

    def __init__(self) -> None:
        self._inputs = array("q")
        self._outputs = array("q")
        self._ttfts = array("d")
        self._latencies = array("d")
        self._timed_offsets = array("q")  # offsets of records with a latency, for concurrency
        self._sessions: set[str] = set()
        self._blocks: set[str] = set()
        self._block_total = self._block_reused = 0
        self._first_offset: int | None = None
        self._last_offset: int | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        offset = int(record["offset_ms"])
        self._first_offset = offset if self._first_offset is None else min(self._first_offset, offset)
        self._last_offset = offset if self._last_offset is None else max(self._last_offset, offset)
        self._inputs.append(int(record["input_tokens"]))
        self._outputs.append(int(record["output_tokens"]))
        if record.get("ttft_ms") is not None:
            self._ttfts.append(record["ttft_ms"])
        if record.get("latency_ms") is not None:
            self._latencies.append(record["latency_ms"])
            self._timed_offsets.append(record["offset_ms"])
        if record.get("session_id") is not None:
            self._sessions.add(record["session_id"])
        for block in record.get("prefix_block_ids") or ():
            self._block_total += 1
            if block in self._blocks:
                self._block_reused += 1
            else:
                self._blocks.add(block)

    def result(self) -> dict[str, Any]:
        n = len(self._inputs)
        span = (None if self._first_offset is None or self._last_offset is None
                else self._last_offset - self._first_offset)
        return {
            "request_count": n,
            "arrival_span_ms": span,
            "request_rate_per_s": request_rate_per_s(n, span),
            "input_tokens": token_summary(self._inputs.tolist()),
            "output_tokens": token_summary(self._outputs.tolist()),
            "ttft_ms": time_summary(self._ttfts.tolist()),
            "latency_ms": time_summary(self._latencies.tolist()),
            "peak_concurrency": peak_concurrency(zip(self._timed_offsets.tolist(),
                                                     self._latencies.tolist(), strict=True)),
            "sessions": len(self._sessions),
            "block_repeat_ratio": (self._block_reused / self._block_total
                                   if self._block_total else None),
            "percentile_method": PERCENTILE_METHOD,
        }
