"""The HTML report opened in headless Chromium: every chart draws, offline, with its labels."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infercrane.adapters.plotly_report import render_html
from infercrane.domain import capacity_synth
from infercrane.domain.capacity import CapacityService
from infercrane.domain.report import build_report
from infercrane.domain.stats import compute_statistics
from tests.support.browser import png_pixels, rendered, screenshot
from tests.support.capacity_memory import MemoryCapacityStore

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
END = datetime(2026, 11, 30, tzinfo=UTC)
MODEL = "sha256:" + "cd" * 32


def mooncake_trace():
    rows = [json.loads(line) for line in (TRACES / "mooncake_fast25_synthetic_trace.jsonl")
            .read_text().splitlines() if line.strip()]
    records = [{"offset_ms": r["timestamp"], "input_tokens": r["input_length"],
                "output_tokens": r["output_length"], "latency_ms": None, "session_id": None,
                "prefix_block_ids": [str(h) for h in r["hash_ids"]]} for r in rows]
    return {"digest": "sha256:" + "ab" * 32, "deployment": "chat", "sample_count": len(records),
            "window": {"start": "2026-11-30T00:00:00Z", "end": "2026-11-30T00:30:00Z",
                       "duration_ms": 1_800_000},
            "evidence_class": "imported", "timing_source": "modeled", "records": records,
            "statistics": compute_statistics(records)}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    svc = CapacityService(MemoryCapacityStore())
    synth = capacity_synth.generate(800, seed=7, end=END, hours=24)
    for batch in capacity_synth.batches(synth.attempts):
        svc.ingest("acme", batch, END)
    capacity = svc.report("acme", "48h", END, "region,gpu", END)
    cache = {"model": MODEL, "observations": [
        {"adapter": "aws", "location": "us-east-1a", "state": "present", "age_s": 30,
         "expires_in_s": 3000},
        {"adapter": "gcp", "location": "us-central1-a", "state": "unknown", "age_s": 0,
         "expires_in_s": 0}]}
    execution = {"execution_id": "ex-1", "evidence_class": "approximation",
                 "method": "aiperf-mean-concurrency", "digest": "sha256:" + "ef" * 32,
                 "source": {"trace_digest": "sha256:" + "ab" * 32},
                 "comparison": [{"metric": "input tokens mean", "captured": 100.0,
                                 "candidate": 97.0},
                                {"metric": "latency p50 (ms)", "captured": 800, "candidate": 950}],
                 "fidelity": {"line": "ISL 97.0 vs trace 100.0"},
                 "started_at": "2026-11-30T01:00:00.000Z", "ended_at": "2026-11-30T01:05:00.000Z"}
    report = build_report(deployment="chat", trace=mooncake_trace(), capacity=capacity,
                          caches={MODEL: cache}, execution=execution, generated_at=END)
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    return report, path


def test_the_file_needs_no_network(page):
    _, path = page
    text = path.read_text()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert not re.search(r"<script[^>]+src=", text)
    assert not re.search(r"<link[^>]+href=", text)


def test_every_chart_draws_in_chromium_without_errors(page):
    report, path = page
    dom = rendered(path)
    assert json.loads(dom.body["data-errors"]) == []
    charts = [f for f in report["figures"] if not f.get("empty")]
    assert len(charts) == 7  # arrivals, input, output, prefix reuse, heatmap, cache, fidelity
    assert dom.body["data-drawn"] == str(len(charts))
    assert [s.figure for s in dom.sections] == [f["id"] for f in report["figures"]]
    for section, figure in zip(dom.sections, report["figures"], strict=True):
        assert section.drawn, figure["id"]
        assert section.marks > 0, f"{figure['id']} drew no plot elements"
        flat = " ".join(section.text.split())
        assert f"evidence: {figure['evidence_class']}" in flat
        assert figure["source_digest"] in flat
        assert figure["dates"] in flat
    heatmap = next(s for s in dom.sections if s.figure == "capacity-heatmap")
    assert "(n=" in heatmap.text  # each cell states its sample count


def test_a_script_error_or_a_fetch_would_be_caught(page, tmp_path):
    _, path = page
    broken = tmp_path / "broken.html"
    broken.write_text(path.read_text().replace(
        "</body>", "<script>notDefined();</script><img src='https://example.com/x.png'></body>"))
    errors = json.loads(rendered(broken).body["data-errors"])
    assert any("notDefined" in e for e in errors)
    assert any("example.com" in e for e in errors)  # blocked by the page's policy, recorded


def test_every_bar_is_drawn_by_the_load_event_without_extra_rendering_time(page, tmp_path):
    # Chromium's screenshot as soon as the page loaded against one given 8 s of virtual time for
    # timers, promises and resizes: equal pixels mean nothing was drawn (or redrawn) after load.
    _, path = page
    quick, settled = tmp_path / "quick.png", tmp_path / "settled.png"
    screenshot(path, quick, width=1400, height=2000, settle=False)
    screenshot(path, settled, width=1400, height=2000)
    assert png_pixels(quick) == png_pixels(settled)


def test_a_window_without_requests_or_attempts_says_no_data_and_names_its_dates(tmp_path):
    trace = {"digest": "sha256:" + "00" * 32, "deployment": "quiet", "sample_count": 0,
             "window": {"start": "2023-11-16T18:00:00Z", "end": "2023-11-16T19:00:00Z",
                        "duration_ms": 3_600_000},
             "evidence_class": "imported", "timing_source": "modeled", "records": [],
             "statistics": compute_statistics([])}
    capacity = CapacityService(MemoryCapacityStore()).report("acme", "24h", END, "region,gpu", END)
    report = build_report(deployment="quiet", trace=trace, capacity=capacity, caches={},
                          execution=None, generated_at=END)
    assert [f["id"] for f in report["figures"] if f.get("empty")] == [
        "arrival-rate", "input-tokens", "output-tokens", "prefix-reuse", "capacity-heatmap"]
    assert any("Capacity shows 2026-11-29" in n and "2023-11-16T18:00:00Z" in n
               for n in report["notes"])  # capacity and traffic do not overlap: said
    path = tmp_path / "quiet.html"
    path.write_text(render_html(report), encoding="utf-8")
    dom = rendered(path)
    assert json.loads(dom.body["data-errors"]) == []
    for section, figure in zip(dom.sections, report["figures"], strict=True):
        flat = " ".join(section.text.split())
        assert not section.drawn and section.marks == 0, figure["id"]  # no axis from -1 to 1
        assert "No data:" in flat and figure["dates"] in flat, figure["id"]
    assert "traffic 2023-11-16T18:00:00Z → 2023-11-16T19:00:00Z" in dom.sections[0].text
    assert "capacity 2026-11-29" in dom.sections[4].text
