"""Day rollups: a closed day is compacted from its hours, and long reports read it instead.

Oracles are computed here from the submitted attempt documents (counts by hand, percentiles with
numpy's `lower` method, which is the lower nearest rank floor(q*(n-1)), bucket counts with
ddsketch's own mapping value by value), never from the code under test."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from ddsketch.mapping import LogarithmicMapping
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain import capacity_synth
from infercrane.domain.capacity import (
    EXACT_IN_REPORT,
    EXACT_PER_DAY,
    RELATIVE_ACCURACY,
    CapacityService,
    DayDurations,
    DurationMerge,
    DurationSummary,
)
from tests.support.capacity_memory import MemoryCapacityStore

END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=5)
DIMS = ("adapter", "runtime", "compute_mode", "region", "gpu")


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def oracle(attempts: list[dict[str, Any]]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Per group: counts and lower-nearest-rank p50/p95 (seconds), from the documents."""
    by: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for a in attempts:
        by[tuple(a[d] for d in DIMS)].append(a)
    out = {}
    for key, docs in by.items():
        outcomes = Counter(a["outcome"] for a in docs)
        durations = [ms(a["finished_at"]) - ms(a["started_at"]) for a in docs
                     if a["outcome"] != "cancelled" and a.get("finished_at")]
        out[key] = {"samples": len(docs), "succeeded": outcomes["succeeded"],
                    "failed": outcomes["failed"], "cancelled": outcomes["cancelled"],
                    "n": len(durations),
                    **{f"p{int(q * 100)}": float(np.quantile(durations, q, method="lower")) / 1000
                       for q in (0.5, 0.95)}}
    return out


def check(report: dict[str, Any], attempts: list[dict[str, Any]]) -> dict[str, str]:
    """Every figure against the oracle; returns each group's duration method."""
    truth = oracle(attempts)
    groups = {tuple(g[d] for d in DIMS): g for g in report["groups"]}
    assert set(groups) == set(truth)
    methods = {}
    for key, t in truth.items():
        g = groups[key]
        assert (g["samples"], g["succeeded"], g["failed"], g["cancelled"]) == (
            t["samples"], t["succeeded"], t["failed"], t["cancelled"])
        decided = t["succeeded"] + t["failed"]
        assert g["success_rate"] == round(t["succeeded"] / decided, 6)
        assert g["duration_samples"] == t["n"]
        for name in ("p50", "p95"):
            got = g[f"{name}_duration_s"]
            if got is None:
                continue
            if g["duration_method"] == "exact":
                assert g["duration_relative_error"] == 0
                assert got == round(t[name], 3)
            else:
                assert g["duration_relative_error"] == RELATIVE_ACCURACY
                assert abs(got - t[name]) <= RELATIVE_ACCURACY * t[name] + 0.0005
        methods["/".join(key)] = g["duration_method"]
    return methods


def loaded(attempts: list[dict[str, Any]], now: datetime = NOW,
           store: MemoryCapacityStore | None = None) -> tuple[CapacityService, MemoryCapacityStore]:
    store = store or MemoryCapacityStore()
    svc = CapacityService(store)
    for batch in capacity_synth.batches(attempts):
        assert svc.ingest("acme", batch, now).rejected == 0
    return svc, store


def attempt(i: int, started: datetime, seconds: float, outcome: str = "succeeded") -> dict:
    return {"attempt_id": f"b-{i}", "deployment": "coder", "operation": "create",
            "adapter": "aws", "runtime": "vllm", "compute_mode": "spot", "region": "us-east-1",
            "gpu": "H100", "gpu_count": 8,
            "started_at": started.isoformat().replace("+00:00", "Z"),
            "finished_at": (started + timedelta(seconds=seconds)).isoformat().replace(
                "+00:00", "Z"), "outcome": outcome}


def test_a_long_report_reads_one_day_rollup_a_day_and_matches_the_attempts():
    synth = capacity_synth.generate(12_000, seed=17, end=END)
    svc, store = loaded(synth.attempts)
    result = svc.aggregate(NOW)
    assert (result.hours, result.days, result.still_dirty) == (720, 30, 0)
    assert not store.marks
    report = svc.report("acme", "720h", END, None, NOW)
    assert report["read"] == {"rollup_items": 30, "day_items": 30, "tail_hours": 0,
                              "tail_attempts": 0}
    # No group-day holds more than 64 here, so a group is exact exactly while n <= 500.
    expected = {"/".join(k): "exact" if t["n"] <= EXACT_IN_REPORT else "ddsketch"
                for k, t in oracle(synth.attempts).items()}
    assert set(expected.values()) == {"exact", "ddsketch"}  # both sides of the bound
    assert check(report, synth.attempts) == expected


def test_groups_beyond_the_exact_bound_are_sketches_within_the_stated_error():
    synth = capacity_synth.generate(40_000, seed=23, end=END)
    svc, _ = loaded(synth.attempts)
    svc.aggregate(NOW)
    report = svc.report("acme", "720h", END, None, NOW)
    assert all(g["duration_samples"] > EXACT_IN_REPORT for g in report["groups"])
    assert set(check(report, synth.attempts).values()) == {"ddsketch"}


def test_a_partial_day_window_mixes_day_and_hour_rollups_and_still_matches():
    synth = capacity_synth.generate(6_000, seed=29, end=END)
    svc, _ = loaded(synth.attempts)
    svc.aggregate(NOW)
    until = END - timedelta(hours=5, minutes=30)  # 10 days ending mid-day: partial days at both ends
    report = svc.report("acme", "240h", until, None, NOW)
    end_ms = ms((until.replace(minute=0) + timedelta(hours=1)).isoformat())
    inside = [a for a in synth.attempts if end_ms - 240 * 3_600_000 <= ms(a["started_at"]) < end_ms]
    assert 0 < report["read"]["day_items"] < report["read"]["rollup_items"]
    check(report, inside)


def test_a_day_burst_over_the_per_day_bound_is_labelled_an_estimate_but_short_windows_stay_exact():
    day = END - timedelta(days=2)
    rng = random.Random(5)
    burst = [attempt(i, day + timedelta(minutes=9 * i), rng.uniform(60, 900))
             for i in range(EXACT_PER_DAY + 40)]  # 104 in one day, at most 7 an hour
    svc, _ = loaded(burst)
    svc.aggregate(NOW)
    long = svc.report("acme", "720h", END, None, NOW)
    assert check(long, burst) == {"aws/vllm/spot/us-east-1/H100": "ddsketch"}
    assert long["read"]["day_items"] == 1  # the one day with attempts
    # A week or less reads hour rollups: exact while each hour holds at most 64.
    short = svc.report("acme", "168h", END, None, NOW)
    assert short["read"]["day_items"] == 0
    assert check(short, burst) == {"aws/vllm/spot/us-east-1/H100": "exact"}


def test_an_open_day_waits_rolled_up_and_is_compacted_once_it_closes():
    morning = END + timedelta(hours=2)
    now = END + timedelta(hours=10)
    items = [attempt(i, morning + timedelta(minutes=7 * i), 120 + i) for i in range(30)]
    svc, store = loaded(items, now)
    result = svc.aggregate(now)
    assert (result.days, result.awaiting_day_close, result.still_dirty) == (0, 4, 0)
    assert not store.day_items
    assert {m.rolled for m in store.marks.values()} == {True}
    during = svc.report("acme", "720h", now, None, now)
    assert (during["read"]["tail_hours"], during["read"]["rollup_items"]) == (0, 4)
    check(during, items)
    later = END + timedelta(days=1, minutes=10)
    assert svc.aggregate(later).days == 1
    assert not store.marks
    after = svc.report("acme", "720h", END + timedelta(days=1), None, later)
    assert after["read"] == {"rollup_items": 1, "day_items": 1, "tail_hours": 0,
                             "tail_attempts": 0}
    assert after["groups"] == during["groups"]


def test_closing_a_day_compacts_its_rolled_hours_without_reading_their_attempts_again():
    morning = END + timedelta(hours=2)
    now = END + timedelta(hours=10)
    items = [attempt(i, morning + timedelta(minutes=7 * i), 120 + i) for i in range(30)]
    svc, store = loaded(items, now)
    read: list[int] = []
    attempts_in_hour = store.attempts_in_hour

    def counted(tenant: str, hour: int) -> Any:
        read.append(hour)
        return attempts_in_hour(tenant, hour)

    store.attempts_in_hour = counted  # type: ignore[method-assign]
    svc.aggregate(now)
    assert len(read) == 4  # the four dirty hours, rolled up once
    closed = svc.aggregate(END + timedelta(days=1, minutes=10))
    assert (closed.days, closed.hours, len(read)) == (1, 0, 4)


def test_a_late_arrival_into_a_compacted_day_is_read_from_its_hours_until_recompacted():
    synth = capacity_synth.generate(3_000, seed=31, end=END)
    svc, _ = loaded(synth.attempts)
    svc.aggregate(NOW)
    late = [attempt(i, END - timedelta(days=3, hours=-4), 300) for i in range(3)]
    assert svc.ingest("acme", late, NOW).new == 3
    tail = svc.report("acme", "720h", END, None, NOW)
    assert tail["read"]["tail_hours"] == 1
    assert tail["read"]["day_items"] == 30  # read, but the marked day's is not used
    check(tail, synth.attempts + late)
    assert svc.aggregate(NOW).days == 1
    rolled = svc.report("acme", "720h", END, None, NOW)
    assert rolled["read"] == {"rollup_items": 30, "day_items": 30, "tail_hours": 0,
                              "tail_attempts": 0}
    assert rolled["groups"] == tail["groups"]


def test_hour_rollups_stored_before_day_rollups_existed_read_the_same():
    synth = capacity_synth.generate(8_000, seed=37, end=END)
    svc, store = loaded(synth.attempts)
    svc.aggregate(NOW)
    with_days = svc.report("acme", "720h", END, None, NOW)
    store.day_items.clear()  # a table written by the previous aggregator: hour rollups only
    hours_only = svc.report("acme", "720h", END, None, NOW)
    assert hours_only["read"]["rollup_items"] == 720
    assert hours_only["groups"] == with_days["groups"]
    check(hours_only, synth.attempts)


def test_a_mark_set_again_while_rolling_up_is_never_rescheduled_away():
    store = MemoryCapacityStore()
    now = END + timedelta(hours=10)
    loaded([attempt(0, END + timedelta(hours=2), 60)], now, store)
    (mark,) = store.pending(before_ms=10**15, limit=10)
    store.mark_dirty("acme", [mark.hour], 1)  # a new attempt's mark after the hour was read
    assert store.reschedule(mark, 10**14) is False
    assert store.marks[("acme", mark.hour)].rolled is False


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.one_of(st.integers(0, 10), st.integers(1, 10**9)), max_size=400),
                min_size=1, max_size=8),
       st.lists(st.integers(1, 70_000), max_size=3))
def test_day_parts_add_up_to_the_mapping_s_bucket_counts(days, heavy):
    """Dense day parts (counts of every width, wide lanes) merge to the buckets ddsketch's
    mapping gives each value, and the quantiles follow."""
    mapping = LogarithmicMapping(RELATIVE_ACCURACY)
    parts = [[*values, *([250_000] * (heavy[i] if i < len(heavy) else 0))]
             for i, values in enumerate(days)]
    merge = DurationMerge()
    for values in parts:
        hour = DurationSummary()
        for v in values:
            hour.add(v)
        one = DurationMerge()
        one.add_hour(hour)
        merge.add_day(DayDurations.from_document(one.day_durations().to_document()))
    flat = sorted(v for values in parts for v in values)
    lo, counts, zero = merge.dense()
    assert {lo + i: c for i, c in enumerate(counts) if c} == dict(
        Counter(mapping.key(v) for v in flat if v > 0))
    assert zero == sum(1 for v in flat if v <= 0)
    result = merge.finish(EXACT_IN_REPORT)
    for q in (0.5, 0.95):
        if not flat:
            continue
        true = float(np.quantile(flat, q, method="lower"))
        assert abs(result.quantile_ms(q) - true) <= RELATIVE_ACCURACY * true + 1e-9
        if result.exact:
            assert result.quantile_ms(q) == true


@pytest.mark.parametrize("window", ["24h", "168h", "169h", "720h"])
def test_every_window_length_agrees_with_the_attempts(window):
    synth = capacity_synth.generate(5_000, seed=41, end=END)
    svc, _ = loaded(synth.attempts)
    svc.aggregate(NOW)
    report = svc.report("acme", window, END, None, NOW)
    hours = int(window[:-1])
    start_ms = ms(END.isoformat()) - hours * 3_600_000
    check(report, [a for a in synth.attempts if ms(a["started_at"]) >= start_ms])
