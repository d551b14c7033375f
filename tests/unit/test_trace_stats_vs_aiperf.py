"""Statistics AIPerf also reports carry AIPerf's names only with AIPerf's definitions.

Oracle: AIPerf's own `analyze-trace` analyzer (PrefixAnalyzer, block size 512) on the vendored
Mooncake trace. Our block statistic is a different quantity, so it must not wear AIPerf's name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercrane.domain.stats import compute_statistics

MOONCAKE = Path(__file__).resolve().parents[1] / "fixtures/traces/mooncake_fast25_synthetic_trace.jsonl"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def analysis(rows):
    analyzer = pytest.importorskip("aiperf.dataset.synthesis.prefix_analyzer")  # extra `execute`
    return analyzer.PrefixAnalyzer(block_size=512).analyze_traces(rows).model_dump()


def ours(rows) -> dict:
    t0 = rows[0]["timestamp"]
    return compute_statistics([{
        "offset_ms": r["timestamp"] - t0, "input_tokens": r["input_length"],
        "output_tokens": r["output_length"], "ttft_ms": None, "latency_ms": None,
        "session_id": None, "prefix_block_ids": [str(h) for h in r["hash_ids"]]} for r in rows])


def test_no_statistic_shares_a_name_with_a_different_aiperf_value(rows, analysis):
    stats = ours(rows)
    shared = set(stats) & set(analysis)
    assert all(stats[name] == pytest.approx(analysis[name]) for name in shared), shared


def test_the_block_statistic_is_not_aiperfs_prefix_reuse_ratio(rows, analysis):
    stats = ours(rows)
    assert "prefix_reuse_ratio" not in stats
    blocks = [h for r in rows for h in r["hash_ids"]]
    # Repeats over all blocks = (all - distinct) / all: counted another way than the code does.
    assert stats["block_repeat_ratio"] == pytest.approx((len(blocks) - len(set(blocks))) / len(blocks))
    # AIPerf's prefix_reuse_ratio counts reused prefix paths: a different quantity.
    assert abs(stats["block_repeat_ratio"] - analysis["prefix_reuse_ratio"]) > 0.05


def test_shared_quantities_agree_under_their_own_names(rows, analysis):
    stats = ours(rows)
    assert stats["request_count"] == analysis["total_requests"]
    assert stats["input_tokens"]["mean"] == pytest.approx(analysis["avg_isl"])
    assert stats["input_tokens"]["max"] == analysis["max_isl"]
    assert stats["output_tokens"]["mean"] == pytest.approx(analysis["avg_osl"])
    assert stats["output_tokens"]["max"] == analysis["max_osl"]
