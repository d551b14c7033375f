"""Replay execution, pure parts: AIPerf parameters from a trace, evidence documents and digests."""

from __future__ import annotations

import copy
import json
import statistics
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.adapters.aiperf_format import measured_figures, profile_args
from infercrane.domain.aiperf_export import mooncake_rows
from infercrane.domain.execution import (
    RunOutcome,
    Target,
    build_evidence,
    check_evidence,
    make_revision,
    plan_execution,
)
from infercrane.errors import InvalidInput
from tests.support.execution import make_trace

TARGET = Target(url="http://127.0.0.1:8000", model="test-llm", revision="candidate",
                api_key_env="CANDIDATE_KEY")
NOW = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)


def summary(**overrides: Any) -> dict[str, Any]:
    """The shape of AIPerf 0.13's profile_export_aiperf.json (the fields evidence reads)."""
    def metric(avg: float, unit: str = "ms") -> dict[str, Any]:
        return {"unit": unit, "avg": avg, "p50": avg, "p95": avg * 1.5, "p99": avg * 2,
                "min": avg / 2, "max": avg * 2, "std": 1.0, "count": 12}

    doc = {"schema_version": "1.4", "aiperf_version": "0.13.0",
           "time_to_first_token": metric(8.0), "inter_token_latency": metric(0.8),
           "request_latency": metric(14.5), "input_sequence_length": metric(99.75, "tokens"),
           "output_sequence_length": metric(8.0, "tokens"),
           "request_throughput": {"unit": "requests/sec", "avg": 118.1},
           "output_token_throughput": {"unit": "tokens/sec", "avg": 945.1},
           "request_count": {"unit": "requests", "avg": 12.0},
           "effective_concurrency": {"unit": "requests", "avg": 1.7},
           "benchmark_duration": {"unit": "sec", "avg": 0.09},
           "was_cancelled": False, "is_complete": True, "error_summary": []}
    doc.update(overrides)
    return doc


def measured(**overrides: Any) -> dict[str, Any]:
    """An AIPerf summary as the runner hands it to the domain (the adapter's translation)."""
    return measured_figures(summary(**overrides))


def evidence_of(trace: dict[str, Any], outcome: RunOutcome) -> dict[str, Any]:
    plan = plan_execution(trace, TARGET)
    return build_evidence(plan, execution_id="exe_" + "a" * 24, started=NOW, ended=NOW,
                          outcome=outcome)


sizes = st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 2000)), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(sizes=sizes, spacing=st.integers(1, 400), cap=st.none() | st.integers(1, 80))
def test_mean_plan_takes_sizes_and_peak_concurrency_from_the_trace(
        sizes: list[tuple[int, int]], spacing: int, cap: int | None) -> None:
    trace = make_trace(sizes, spacing_ms=spacing, latency_ms=200.0)
    stats = trace["statistics"]
    inputs = [i for i, _ in sizes]
    outputs = [o for _, o in sizes]

    plan = plan_execution(trace, TARGET, max_requests=cap)
    params = plan.parameters()

    assert abs(params["isl"] - stats["input_tokens"]["mean"]) <= 0.5 or params["isl"] == 1
    assert abs(params["osl"] - stats["output_tokens"]["mean"]) <= 0.5 or params["osl"] == 1
    assert params["isl_stddev"] == pytest.approx(statistics.pstdev(inputs), abs=1e-3)
    assert params["osl_stddev"] == pytest.approx(statistics.pstdev(outputs), abs=1e-3)
    assert params["request_count"] == min(len(sizes), cap or len(sizes))
    assert params["concurrency"] == max(1, min(stats["peak_concurrency"],
                                               params["request_count"]))
    assert plan.estimated_input_tokens == params["isl"] * params["request_count"]


def test_trace_plan_uses_the_traces_mooncake_rows_compressed_and_cut() -> None:
    trace = make_trace([(100 + i, 5) for i in range(10)], spacing_ms=1000)
    exported = list(mooncake_rows(trace))

    whole = plan_execution(trace, TARGET, schedule="trace")
    fast = plan_execution(trace, TARGET, schedule="trace", time_scale=10, max_duration_s=0.45)

    assert list(whole.rows) == exported
    assert [r["timestamp"] for r in fast.rows] == [0, 100, 200, 300, 400]
    assert [r["input_length"] for r in fast.rows] == [100, 101, 102, 103, 104]
    assert fast.request_count == fast.parameters()["input_rows"] == 5
    assert fast.parameters()["fixed_schedule"] is True
    assert fast.method == "aiperf-trace-schedule"
    assert fast.concurrency is None
    assert "--fixed-schedule" in profile_args(fast, "/tmp/out", "/tmp/in.jsonl")


def test_trace_plan_is_capped_by_max_requests() -> None:
    trace = make_trace([(100, 5)] * 10, spacing_ms=10)
    assert plan_execution(trace, TARGET, schedule="trace", max_requests=3).request_count == 3


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"time_scale": 10}, "schedule"),
    ({"schedule": "trace", "time_scale": 0}, "time_scale"),
    ({"schedule": "trace", "max_duration_s": -1}, "max_duration"),
    ({"max_requests": 0}, "max_requests"),
    ({"schedule": "burst"}, "schedule"),
])
def test_bad_execution_options_are_refused_by_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        plan_execution(make_trace([(10, 1)]), TARGET, **kwargs)
    assert exc.value.field == field


def test_an_empty_trace_has_nothing_to_execute() -> None:
    with pytest.raises(InvalidInput) as exc:
        plan_execution(make_trace([]), TARGET)
    assert exc.value.field == "trace.records"


def test_evidence_verifies_and_any_changed_value_breaks_its_digest() -> None:
    trace = make_trace([(100, 10), (120, 12)])
    evidence = evidence_of(trace, RunOutcome(0, measured(), "0.13.0", requests_completed=12))

    assert check_evidence(json.loads(json.dumps(evidence))) == evidence
    assert evidence["evidence_class"] == "approximation"
    assert evidence["source"]["trace_digest"] == trace["digest"]
    assert evidence["measured"]["time_to_first_token_ms"]["p99"] == 16.0
    assert evidence["measured"]["request_count"] == 12
    tampered = copy.deepcopy(evidence)
    tampered["measured"]["time_to_first_token_ms"]["p50"] = 1.0
    with pytest.raises(InvalidInput) as exc:
        check_evidence(tampered)
    assert exc.value.field == "digest"
    # The volatile build block is outside the digest.
    rebuilt = copy.deepcopy(evidence) | {"build": {"software": "other"}}
    assert check_evidence(rebuilt)["digest"] == evidence["digest"]


def test_comparison_puts_captured_and_candidate_figures_side_by_side() -> None:
    trace = make_trace([(100, 10), (120, 12)], latency_ms=150.0, ttft_ms=40.0)
    evidence = evidence_of(trace, RunOutcome(0, measured(), "0.13.0"))
    rows = {r["metric"]: (r["captured"], r["candidate"]) for r in evidence["comparison"]}

    assert rows["TTFT p50 (ms)"] == (40.0, 8.0)
    assert rows["latency p50 (ms)"] == (150.0, 14.5)
    assert rows["input tokens mean"] == (110.0, 99.75)
    assert evidence["fidelity"]["input_tokens_mean"]["ratio"] == pytest.approx(99.75 / 110, 1e-3)
    assert "ISL 99.8 vs trace 110.0" in evidence["fidelity"]["line"]


def test_error_counts_are_kept_without_error_messages() -> None:
    errors = [{"error_details": {"code": 500, "type": "HTTPError",
                                 "message": "upstream said: <the prompt text>"}, "count": 3}]
    evidence = evidence_of(make_trace([(10, 1)]),
                           RunOutcome(0, measured(error_summary=errors), "0.13.0"))

    assert evidence["measured"]["error_count"] == 3
    assert evidence["measured"]["errors"] == [{"type": "HTTPError", "code": 500, "count": 3}]
    assert "prompt text" not in json.dumps(evidence)


def test_a_failed_run_is_failed_evidence_with_its_reason_and_no_measurements() -> None:
    outcome = RunOutcome(1, None, "0.13.0", "aiperf_failed", "AIPerf exited with code 1.")
    evidence = evidence_of(make_trace([(10, 1)]), outcome)

    assert evidence["status"] == "failed"
    assert evidence["failure"] == {"kind": "aiperf_failed", "exit_code": 1,
                                   "reason": "AIPerf exited with code 1."}
    assert evidence["measured"] is None
    assert check_evidence(evidence) == evidence
    # A failure without its reason, or a success without figures, is not evidence.
    for status, failure, measured in (("failed", {"kind": "x"}, None),
                                      ("succeeded", None, None)):
        broken = evidence | {"status": status, "failure": failure, "measured": measured}
        with pytest.raises(InvalidInput):
            check_evidence(broken)


@pytest.mark.parametrize("url", [
    "http://user:pass@10.0.0.7:8000", "https://token@host", "http://h/v1?api_key=x",
    "ftp://host", "http://", "not a url", "http://h:99999",
])
def test_target_urls_with_credentials_or_oddities_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        make_revision("coder-production", "candidate", url, None, None, NOW)
    assert exc.value.field == "url"
    assert url not in exc.value.message


@pytest.mark.parametrize("env", ["sk-live-abc123", "MY KEY", "1ABC", "x" * 200])
def test_api_key_env_must_be_a_variable_name(env: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        make_revision("coder-production", "candidate", "http://h:1", None, env, NOW)
    assert exc.value.field == "api_key_env"
    assert env not in exc.value.message


def test_revision_names_cannot_collide_in_keys() -> None:
    with pytest.raises(InvalidInput) as exc:
        make_revision("coder-production", "a#b", "http://h:1", None, None, NOW)
    assert exc.value.field == "revision"
    ok = make_revision("coder-production", "candidate-2", "http://h:1/", "m", "KEY_VAR", NOW)
    assert ok.url == "http://h:1"
    assert ok.to_document()["api_key_env"] == "KEY_VAR"


def test_a_trace_that_does_not_match_its_digest_is_not_executed() -> None:
    trace = make_trace([(100, 10), (200, 20)])
    trace["records"][0]["input_tokens"] = 5000
    with pytest.raises(InvalidInput) as exc:
        plan_execution(trace, TARGET)
    assert exc.value.field == "trace.digest"
