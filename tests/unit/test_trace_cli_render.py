"""The replay summary's pieces that need no service: the arrivals sparkline and the table."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from infercrane.cli.trace import render_header, sparkline
from infercrane.domain.trace import build_trace, trace_header
from infercrane.domain.windows import Window
from tests.fakes import BASE_MS, observation


def test_sparkline_scales_to_the_busiest_bin_and_keeps_empty_bins_blank():
    line = sparkline([0, 1, 8, 4])
    assert len(line) == 4
    assert line[0] == " "
    assert line[2] == "█"
    assert line[1] != " "
    assert sparkline([0, 0]) == "  "


def test_summary_shows_counts_statistics_and_the_histogram():
    document = build_trace(deployment="coder", window=Window(BASE_MS, BASE_MS + 60_000),
                           max_requests=5, observations=[observation(i) for i in range(5)],
                           truncated=True, built_at=datetime(2026, 11, 29, tzinfo=UTC))
    console = Console(record=True, width=200)
    render_header(console, trace_header(document, size_bytes=123))
    text = console.export_text()
    assert "requests 5 of max 5 (truncated" in text
    assert document["digest"] in text
    assert "input_tokens" in text
    assert "arrivals over the window (24 bins)" in text


def _rendered(**overrides) -> str:
    document = build_trace(deployment="coder", window=Window(BASE_MS, BASE_MS + 60_000),
                           max_requests=5,
                           observations=[observation(i, **overrides) for i in range(5)],
                           truncated=False, built_at=datetime(2026, 11, 29, tzinfo=UTC))
    console = Console(record=True, width=200)
    render_header(console, trace_header(document, size_bytes=123))
    return console.export_text()


def test_modeled_timing_is_labelled_on_its_rows():
    text = _rendered(timing_source="modeled")
    assert "ttft_ms (modeled)" in text
    assert "latency_ms (modeled)" in text
    assert "(modeled)" not in _rendered()


def test_the_rate_is_shown_over_the_arrival_span_with_the_window_apart():
    text = _rendered()
    # 5 arrivals 100 ms apart: 5 / 0.4 s over a 0.4 s span, in a 60 s window
    assert "rate 12.5/s over the arrival span 0.4 s (window 60 s)" in text


def test_a_selected_slice_is_named_with_its_span_sessions_and_distances():
    from infercrane.domain.trace_window import in_memory_trace

    document = in_memory_trace([observation(i) for i in range(40)], deployment="coder",
                               window=Window(BASE_MS, BASE_MS + 60_000), max_requests=10,
                               select="busiest", built_at=datetime(2026, 11, 29, tzinfo=UTC),
                               request_id=None, software=None).document
    console = Console(record=True, width=300)
    render_header(console, trace_header(document, size_bytes=1))
    text = console.export_text()
    assert "(truncated: the busiest slice of 40 in the window)" in text
    assert f"slice busiest {document['selection']['span']['start']} -> " in text
    assert "23.1% of the window's traffic span" in text  # 900 ms of 3,900 ms
    assert "0 sessions left out whole" in text
    assert "input_tokens 0.750" in text  # 10 of 40 distinct token counts: D = 1 - 10/40
