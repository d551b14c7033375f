"""Trace drift: KS and rate tests checked against SciPy; verdicts on real trace halves."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from scipy.stats import ks_2samp as scipy_ks

from infercrane.domain.digest import verify_digest
from infercrane.domain.drift import (
    SAME,
    SHIFTED,
    binomial_two_sided_p,
    compare_traces,
    ks_2samp,
    ks_statistic,
)
from infercrane.domain.stats import compute_statistics
from infercrane.errors import InvalidInput

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
NOW = datetime(2026, 11, 30, tzinfo=UTC)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=80),
       st.lists(st.integers(0, 50), min_size=1, max_size=80))
def test_ks_statistic_equals_scipys_with_ties(a, b):
    assert ks_statistic(a, b) == pytest.approx(scipy_ks(a, b, method="asymp").statistic, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_ks_p_value_agrees_with_scipys_where_verdicts_are_decided(seed):
    rng = np.random.default_rng(seed)
    for n, m in ((20, 30), (50, 50), (200, 80), (1000, 400)):
        for shift in (0.0, 0.2, 0.4, 0.8):
            a = rng.normal(size=n).round(1)  # rounded: tied values, as token counts have
            b = rng.normal(shift, size=m).round(1)
            d, p = ks_2samp(a.tolist(), b.tolist())
            want = scipy_ks(a, b, method="asymp")
            assert d == pytest.approx(want.statistic, abs=1e-12)
            # Stephens' form and SciPy's differ most where p is large and nothing is decided.
            assert p == pytest.approx(want.pvalue, abs=0.005 if want.pvalue < 0.2 else 0.05)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       st.floats(0.01, 0.99))
def test_rate_test_is_scipys_exact_binomial_test(kn, p):
    k, n = kn
    assert binomial_two_sided_p(k, n, p) == pytest.approx(binomtest(k, n, p).pvalue,
                                                          rel=1e-6, abs=1e-12)


def azure_rows():
    with (TRACES / "azure_llm_inference_2023_code.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    t0 = datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])
    return [((datetime.fromisoformat(r["TIMESTAMP"][:26]) - t0).total_seconds() * 1000,
             int(r["ContextTokens"]), int(r["GeneratedTokens"]), None) for r in rows]


def mooncake_rows():
    rows = [json.loads(line) for line in (TRACES / "mooncake_fast25_synthetic_trace.jsonl")
            .read_text().splitlines() if line.strip()]
    return [(float(r["timestamp"]), r["input_length"], r["output_length"],
             [str(h) for h in r["hash_ids"]]) for r in rows]


def trace(name, rows):
    start = min(r[0] for r in rows)
    records = [{"offset_ms": int(o - start), "input_tokens": i, "output_tokens": out,
                "latency_ms": None, "session_id": None, "prefix_block_ids": blocks}
               for o, i, out, blocks in rows]
    return {"digest": f"sha256:{name * 64}"[:71], "deployment": name, "sample_count": len(records),
            "window": {"start": "x", "end": "y", "duration_ms": 3_600_000},
            "evidence_class": "imported", "timing_source": "modeled", "records": records,
            "statistics": compute_statistics(records)}


def scipy_verdict(a, b, significance=0.01):
    return SAME if scipy_ks(a, b).pvalue >= significance else SHIFTED


def test_two_halves_of_one_trace_keep_their_token_shape_and_another_source_does_not():
    rows = azure_rows()
    half = len(rows) // 2
    first, second = trace("a", rows[:half]), trace("b", rows[half:])
    same = compare_traces(first, second, significance=0.01, built_at=NOW)
    other = compare_traces(first, trace("c", mooncake_rows()), significance=0.01, built_at=NOW)
    for name, col in (("input_tokens", 1), ("output_tokens", 2)):
        a, b = [r[col] for r in rows[:half]], [r[col] for r in rows[half:]]
        # The verdict SciPy gives on the same samples, and the expected pattern.
        assert same["figures"][name]["verdict"] == scipy_verdict(a, b) == SAME
        assert same["figures"][name]["statistic"] == pytest.approx(scipy_ks(a, b).statistic)
        assert other["figures"][name]["verdict"] == SHIFTED
    assert other["figures"]["inter_arrival_ms"]["verdict"] == SHIFTED
    assert other["figures"]["prefix_reuse"]["verdict"] == "not comparable"  # Azure has no blocks
    assert other["verdict"] == SHIFTED
    rate = same["figures"]["request_rate"]
    spans = [(rows[half - 1][0] - rows[0][0]) / 1000, (rows[-1][0] - rows[half][0]) / 1000]
    want = ((len(rows) - half - 1) / spans[1]) / ((half - 1) / spans[0])
    assert rate["ratio"] == pytest.approx(want, rel=1e-5)
    assert rate["p_value"] == pytest.approx(binomtest(
        len(rows) - half - 1, len(rows) - 2, spans[1] / sum(spans)).pvalue, rel=1e-6)


def test_the_comparison_is_a_document_with_both_sources_and_its_own_digest():
    rows = azure_rows()
    a, b = trace("a", rows[:300]), trace("b", rows[300:600])
    doc = compare_traces(a, b, significance=0.05, built_at=NOW)
    assert (doc["a"]["digest"], doc["b"]["digest"]) == (a["digest"], b["digest"])
    assert doc["schema"] == "infercrane.trace.comparison/v1"
    assert verify_digest(doc)[0]
    later = compare_traces(a, b, significance=0.05, built_at=NOW.replace(year=2027))
    assert later["digest"] == doc["digest"]  # when it was built is not evidence
    assert compare_traces(a, b, significance=0.01, built_at=NOW)["digest"] != doc["digest"]
    tampered = dict(doc, verdict=SAME if doc["verdict"] == SHIFTED else SHIFTED)
    assert not verify_digest(tampered)[0]
    with pytest.raises(InvalidInput):
        compare_traces(a, b, significance=0.7, built_at=NOW)


def test_a_p_value_that_underflows_prints_as_below_1e_300_not_zero():
    from rich.console import Console

    from infercrane.cli.trace_compare import render_comparison

    doc = compare_traces(trace("a", azure_rows()), trace("c", mooncake_rows()), significance=0.01,
                         built_at=NOW)
    underflowed = [n for n, f in doc["figures"].items() if f.get("p_value") == 0.0]
    assert underflowed, "Azure against Mooncake: some p-value underflows double precision"
    console = Console(record=True, width=200, color_system=None)
    render_comparison(console, doc)
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines()
            if line.count("│") > 3}
    for name in underflowed:
        assert rows[name].split("│")[4].strip() == "< 1e-300", rows[name]
