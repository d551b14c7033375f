"""Execution evidence claims only what it holds: modeled timing is labelled and not compared as
if measured; errors above the threshold never end `succeeded`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from infercrane.cli.execute import render_evidence
from infercrane.domain.execution import RunOutcome, Target, build_evidence, check_evidence, plan_execution
from tests.support.execution import make_trace
from tests.unit.test_execution_plan import measured

TARGET = Target(url="http://127.0.0.1:8000", model="m", revision="candidate")
NOW = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)


def evidence(trace: dict[str, Any], ok: int = 30, errors: int = 0, **kwargs: Any) -> dict[str, Any]:
    error_summary = [{"error_details": {"code": 500, "type": "HTTPError"}, "count": errors}] \
        if errors else []
    run = measured(request_count={"avg": float(ok)}, error_summary=error_summary)
    return build_evidence(plan_execution(trace, TARGET), execution_id="exe_" + "c" * 24,
                          started=NOW, ended=NOW, outcome=RunOutcome(0, run, "0.13.0"), **kwargs)


def rendered(doc: dict[str, Any]) -> str:
    console = Console(record=True, width=200)
    render_evidence(console, doc)
    return console.export_text()


def timing_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["comparison"] if r["metric"].startswith(("TTFT", "latency"))]


def test_modeled_captured_timing_is_labelled_per_side_and_not_comparable():
    doc = evidence(make_trace([(100, 10), (120, 12)], timing_source="modeled"))
    assert doc["captured"]["timing_source"] == "modeled"
    assert doc["measured"]["timing_source"] == "measured"
    rows = timing_rows(doc)
    assert len(rows) == 4
    assert all(r["captured_timing_source"] == "modeled" and r["comparable"] is False for r in rows)
    text = rendered(doc)
    latency = next(line for line in text.splitlines() if "latency p50" in line)
    assert "modeled" in latency
    assert "not comparable" in latency
    assert "%" not in latency


def test_measured_captured_timing_is_compared():
    doc = evidence(make_trace([(100, 10), (120, 12)], latency_ms=150.0))
    assert doc["captured"]["timing_source"] == "measured"
    assert all(r["comparable"] is True for r in timing_rows(doc))
    latency = next(line for line in rendered(doc).splitlines() if "latency p50" in line)
    assert "not comparable" not in latency
    assert "modeled" not in latency
    assert "-90.3%" in latency  # 150 ms captured, 14.5 ms candidate


def test_three_failed_of_thirty_is_degraded_with_the_error_count():
    doc = evidence(make_trace([(10, 1)]), ok=27, errors=3)
    assert doc["status"] == "degraded"
    assert (doc["error_count"], doc["request_count"]) == (3, 30)
    assert "3 of 30 requests failed (10.0 %)" in doc["failure"]["reason"]
    assert check_evidence(json.loads(json.dumps(doc))) == doc
    assert "DEGRADED" in rendered(doc)


def test_nothing_answered_is_failed():
    doc = evidence(make_trace([(10, 1)]), ok=0, errors=30)
    assert doc["status"] == "failed"
    assert doc["measured"] is not None


@pytest.mark.parametrize(("ok", "errors", "limit", "status"), [
    (30, 0, 1.0, "succeeded"),
    (99, 1, 1.0, "succeeded"),  # exactly 1 %: at the threshold
    (98, 2, 1.0, "degraded"),
    (27, 3, 20.0, "succeeded"),  # a stated, looser threshold
])
def test_the_threshold_decides_succeeded_or_degraded(ok, errors, limit, status):
    doc = evidence(make_trace([(10, 1)]), ok=ok, errors=errors, max_error_rate_pct=limit)
    assert doc["status"] == status


def test_degraded_evidence_without_its_reason_is_refused_even_with_a_fresh_digest():
    from infercrane.domain.digest import compute_digest
    from infercrane.errors import InvalidInput

    doc = evidence(make_trace([(10, 1)]), ok=27, errors=3) | {"failure": None}
    doc["digest"] = compute_digest(doc)
    with pytest.raises(InvalidInput) as raised:
        check_evidence(doc)
    assert raised.value.field == "failure.reason"
