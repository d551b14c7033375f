"""Uncertainty of capacity figures, checked against SciPy's independent Wilson interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from scipy.stats import binomtest

from infercrane.cli.capacity import render
from infercrane.domain import capacity_synth
from infercrane.domain.capacity import CapacityService
from infercrane.domain.uncertainty import MIN_N_RATE, wilson_interval
from tests.support.capacity_memory import MemoryCapacityStore

END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=5)


def scipy_wilson(k: int, n: int) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


@given(st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_matches_scipy(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    want_lo, want_hi = scipy_wilson(k, n)
    assert lo == pytest.approx(want_lo, abs=1e-12)
    assert hi == pytest.approx(want_hi, abs=1e-12)


def test_three_of_three_is_a_wider_interval_than_970_of_1000():
    lo3, hi3 = wilson_interval(3, 3)
    lo970, hi970 = wilson_interval(970, 1000)
    assert lo3 < lo970  # 3/3 is weaker evidence of success than 970/1000
    assert hi3 - lo3 > 5 * (hi970 - lo970)
    assert wilson_interval(0, 0) is None


def small_group(n_ok: int, gpu: str, start_i: int) -> list[dict]:
    out = []
    for i in range(n_ok):
        start = END - timedelta(hours=3, minutes=start_i + i)
        out.append({"attempt_id": f"a{start_i + i}", "deployment": "d", "operation": "create",
                    "adapter": "aws", "runtime": "vllm", "compute_mode": "spot",
                    "region": "us-east-1", "gpu": gpu, "gpu_count": 8,
                    "started_at": start.isoformat(),
                    "finished_at": (start + timedelta(seconds=60 + i)).isoformat(),
                    "outcome": "succeeded"})
    return out


def test_report_carries_scipy_intervals_and_sorts_by_evidence_strength():
    svc = CapacityService(MemoryCapacityStore())
    synth = capacity_synth.generate(3000, seed=3, end=END, hours=48)
    for batch in capacity_synth.batches(synth.attempts):
        assert svc.ingest("acme", batch, NOW).rejected == 0
    # A perfect but tiny group: 3 of 3 must not sort above well-measured groups.
    assert svc.ingest("acme", small_group(3, "B200", 0), NOW).rejected == 0
    doc = svc.report("acme", "72h", END, None, NOW)
    assert doc["uncertainty"]["confidence"] == 0.95
    order = {"strong": 0, "moderate": 1, "weak": 2, "insufficient": 3}
    ranks = [order[g["evidence"]] for g in doc["groups"]]
    assert ranks == sorted(ranks)
    tiny = doc["groups"][-1]
    assert (tiny["gpu"], tiny["success_rate"], tiny["insufficient"]) == ("B200", 1.0, True)
    assert tiny["p50_insufficient"] and tiny["p95_insufficient"]
    for g in doc["groups"]:
        truth = synth.truth.get((g["adapter"], g["runtime"], g["compute_mode"], g["region"],
                                 g["gpu"]))
        decided = g["succeeded"] + g["failed"]
        if truth is not None:
            assert decided == truth.succeeded + truth.failed
        lo, hi = scipy_wilson(g["succeeded"], decided)
        assert g["success_rate_ci"] == [pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6)]
        assert g["insufficient"] is (decided < MIN_N_RATE)
        assert g["p95_insufficient"] is (g["p95_duration_s"] is None)


def test_table_says_too_few_samples_instead_of_a_number_and_shows_the_interval():
    svc = CapacityService(MemoryCapacityStore())
    assert svc.ingest("acme", small_group(3, "B200", 0), NOW).rejected == 0
    doc = svc.report("acme", "24h", END, None, NOW)
    console = Console(record=True, width=300, color_system=None)
    render(console, doc)
    text = console.export_text()
    row = next(line for line in text.splitlines() if "B200" in line)
    assert "too few samples (n=3)" in row
    lo, hi = scipy_wilson(3, 3)
    assert f"{100 * lo:.1f}-{100 * hi:.1f}%" in row
    assert "insufficient" in row
