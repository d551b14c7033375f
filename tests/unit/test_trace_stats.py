from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from infercrane.domain.stats import block_repeat_ratio, compute_statistics, nearest_rank, peak_concurrency


def record(offset_ms, latency_ms=100.0, input_tokens=10, output_tokens=2, **extra):
    return {"offset_ms": offset_ms, "latency_ms": latency_ms, "input_tokens": input_tokens,
            "output_tokens": output_tokens, "ttft_ms": None, "session_id": None,
            "prefix_block_ids": None, **extra}


def test_nearest_rank_returns_an_observed_value_at_rank_ceil_p_n():
    values = list(range(1, 11))  # 1..10
    assert nearest_rank(values, 50) == 5    # ceil(0.5 * 10) = 5th value
    assert nearest_rank(values, 95) == 10   # ceil(9.5) = 10th value
    assert nearest_rank([7], 95) == 7
    assert nearest_rank([], 50) is None


def test_an_end_at_t_frees_its_slot_before_an_arrival_at_t():
    assert peak_concurrency([(0, 10), (10, 10), (20, 10)]) == 1


def test_overlapping_requests_count_together():
    assert peak_concurrency([(0, 10), (5, 10), (9, 2), (30, 1)]) == 3


def test_a_zero_latency_request_counts_at_its_instant():
    assert peak_concurrency([(0, 10), (5, 0)]) == 2
    assert peak_concurrency([(5, 0)]) == 1
    assert peak_concurrency([]) == 0


def _brute_force_peak(intervals):
    best = 0
    for t, _ in intervals:
        in_flight = sum(1 for a, lat in intervals
                        if (a <= t < a + lat) or (lat == 0 and a == t))
        best = max(best, in_flight)
    return best


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), max_size=40))
def test_sweep_line_agrees_with_counting_at_every_arrival(intervals):
    assert peak_concurrency([(a, float(lat)) for a, lat in intervals]) == _brute_force_peak(intervals)


def test_prefix_reuse_is_the_share_of_blocks_seen_earlier_in_the_trace():
    assert block_repeat_ratio([["a", "b"], ["a", "b", "c"], None, ["d"]]) == 2 / 6
    assert block_repeat_ratio([None, []]) is None


def test_means_are_exact_quotients_and_percentiles_use_nearest_rank():
    records = [record(i * 10, input_tokens=n, output_tokens=n % 3 + 1)
               for i, n in enumerate([1, 2, 2, 7, 100, 3])]
    stats = compute_statistics(records)
    inputs = [1, 2, 2, 7, 100, 3]
    assert stats["input_tokens"]["mean"] == float(Fraction(sum(inputs), len(inputs)))
    assert stats["input_tokens"]["p50"] == sorted(inputs)[math.ceil(0.5 * 6) - 1]
    assert stats["input_tokens"]["max"] == 100
    assert stats["request_count"] == 6
    # six arrivals from offset 0 to offset 50 ms: the rate is over those 50 ms
    assert stats["arrival_span_ms"] == 50
    assert stats["request_rate_per_s"] == 6 / 0.050
    assert stats["percentile_method"] == "nearest-rank"
    assert stats["ttft_ms"] == {"p50": None, "p95": None}


def test_statistics_of_nothing_are_empty_not_errors():
    stats = compute_statistics([])
    assert stats["request_count"] == 0
    assert stats["request_rate_per_s"] is None
    assert stats["arrival_span_ms"] is None
    assert stats["input_tokens"] == {"mean": None, "p50": None, "p95": None, "max": None}
    assert stats["peak_concurrency"] == 0
    assert stats["sessions"] == 0
    assert stats["block_repeat_ratio"] is None


def test_sessions_count_distinct_session_identities():
    records = [record(0, session_id="v1:a"), record(1, session_id="v1:a"),
               record(2, session_id="v1:b"), record(3)]
    assert compute_statistics(records)["sessions"] == 2


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=60))
def test_token_summaries_are_ordered_and_bounded(values):
    stats = compute_statistics([record(i, input_tokens=v) for i, v in enumerate(values)])
    s = stats["input_tokens"]
    assert min(values) <= s["p50"] <= s["p95"] <= s["max"] == max(values)
    assert min(values) <= s["mean"] <= max(values)
    assert s["mean"] == sum(values) / len(values)
    assert s["p50"] in values
    assert s["p95"] in values


def test_rate_is_requests_over_the_arrival_span_not_over_the_window():
    # 5 arrivals at 0, 1, 2, 3, 4 s: 5 requests over 4 s, whatever window holds them
    stats = compute_statistics([record(1000 * i) for i in range(5)])
    assert stats["arrival_span_ms"] == 4000
    assert stats["request_rate_per_s"] == 1.25


def test_a_single_arrival_has_no_rate():
    assert compute_statistics([record(500)])["request_rate_per_s"] is None
    assert compute_statistics([record(7), record(7)])["request_rate_per_s"] is None
