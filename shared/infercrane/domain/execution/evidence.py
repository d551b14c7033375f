"""A run's outcome and the evidence document built from it (`infercrane.replay.execution/v1`):
measured and captured figures side by side, the fidelity of the approximation, and the status
the share of failed requests gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from infercrane.clock import rfc3339
from infercrane.domain.digest import compute_digest
from infercrane.domain.execution.plan import ExecutionPlan

SCHEMA = "infercrane.replay.execution/v1"
EVIDENCE_CLASS = "approximation"
NOTE = ("An approximation: AIPerf sent synthetic prompts shaped by the trace's token sizes and "
        "concurrency (or arrival schedule). It does not reproduce prompt semantics, caching "
        "behaviour or exact arrival timing.")


# -- a run's outcome ---------------------------------------------------------------------------
FailureKind = Literal["aiperf_failed", "interrupted", "no_results", "not_installed", "timeout",
                      "error_rate"]
DEFAULT_MAX_ERROR_RATE_PCT = 1.0


@dataclass(frozen=True)
class RunOutcome:
    """What the load generator reports. `measured` holds the run's figures in the evidence's own
    terms (its `measured` block): the generator's adapter translates its summary into them."""

    exit_code: int | None
    measured: Mapping[str, Any] | None
    aiperf_version: str | None
    failure_kind: FailureKind | None = None
    failure_reason: str | None = None
    requests_completed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.failure_kind is not None


def finite_or_none(value: Any) -> float | None:
    """A finite JSON number as a float; anything else (a bool, a string, NaN, infinity) None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def side_timing(trace_timing_source: str) -> str:
    """A side's timing label: `measured` only when the trace's timing was observed."""
    return "measured" if trace_timing_source == "observed" else "modeled"


def captured_figures(stats: Mapping[str, Any], timing_source: str = "modeled") -> dict[str, Any]:
    def pick(name: str, keys: Sequence[str]) -> dict[str, Any] | None:
        value = stats.get(name)
        return {k: finite_or_none(value.get(k)) for k in keys} if isinstance(value, Mapping) else None

    return {"ttft_ms": pick("ttft_ms", ("p50", "p95")),
            "latency_ms": pick("latency_ms", ("p50", "p95")),
            "input_tokens": pick("input_tokens", ("mean", "p50", "p95", "max")),
            "output_tokens": pick("output_tokens", ("mean", "p50", "p95", "max")),
            "request_rate_per_s": finite_or_none(stats.get("request_rate_per_s")),
            "peak_concurrency": stats.get("peak_concurrency"),
            "request_count": stats.get("request_count"),
            "timing_source": side_timing(timing_source)}


def _ratio(measured: float | None, trace: float | None) -> float | None:
    if measured is None or not trace:
        return None
    return round(measured / trace, 4)


def fidelity(plan: ExecutionPlan, measured: Mapping[str, Any] | None) -> dict[str, Any]:
    m = measured or {}
    isl = (m.get("input_sequence_length") or {}).get("avg")
    osl = (m.get("output_sequence_length") or {}).get("avg")
    conc = m.get("effective_concurrency")
    count = m.get("request_count")
    doc: dict[str, Any] = {
        "input_tokens_mean": {"trace": plan.trace_isl_mean, "given": plan.isl, "measured": isl,
                              "ratio": _ratio(isl, plan.trace_isl_mean)},
        "output_tokens_mean": {"trace": plan.trace_osl_mean, "given": plan.osl, "measured": osl,
                               "ratio": _ratio(osl, plan.trace_osl_mean)},
        "concurrency": {"trace_peak": plan.trace_peak_concurrency, "given": plan.concurrency,
                        "measured_effective": conc},
        "request_count": {"trace": plan.trace.sample_count, "planned": plan.request_count,
                          "measured": count},
    }

    doc["line"] = fidelity_line(doc)
    return doc


def fidelity_line(doc: Mapping[str, Any]) -> str:
    """The one-line summary of a fidelity block, from its own figures (the service recomputes it,
    so a posted line can only be this sentence)."""
    def show(v: Any) -> str:
        return "n/a" if v is None else f"{v:,.1f}"

    isl, osl = doc["input_tokens_mean"], doc["output_tokens_mean"]
    conc, count = doc["concurrency"], doc["request_count"]
    return (f"ISL {show(isl['measured'])} vs trace {show(isl['trace'])}; "
            f"OSL {show(osl['measured'])} vs trace {show(osl['trace'])}; "
            f"concurrency {show(conc['measured_effective'])} (given {conc['given'] or 'schedule'})"
            f" vs trace peak {conc['trace_peak']}; requests "
            f"{count['measured'] if count['measured'] is not None else 'n/a'} of "
            f"{count['planned']} planned")


COMPARISON_ROWS = (
    ("TTFT p50 (ms)", ("ttft_ms", "p50"), ("time_to_first_token_ms", "p50")),
    ("TTFT p95 (ms)", ("ttft_ms", "p95"), ("time_to_first_token_ms", "p95")),
    ("latency p50 (ms)", ("latency_ms", "p50"), ("request_latency_ms", "p50")),
    ("latency p95 (ms)", ("latency_ms", "p95"), ("request_latency_ms", "p95")),
    ("input tokens mean", ("input_tokens", "mean"), ("input_sequence_length", "avg")),
    ("output tokens mean", ("output_tokens", "mean"), ("output_sequence_length", "avg")),
    ("request rate (/s)", ("request_rate_per_s",), ("request_throughput_per_s",)),
    ("concurrency", ("peak_concurrency",), ("effective_concurrency",)),
)
COMPARISON_LABELS = frozenset(label for label, _, _ in COMPARISON_ROWS)


def _dig(doc: Mapping[str, Any] | None, path: Sequence[str]) -> Any:
    value: Any = doc
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


TIMING_METRICS = frozenset({"ttft_ms", "latency_ms"})


def comparison(captured: Mapping[str, Any], measured: Mapping[str, Any] | None
               ) -> list[dict[str, Any]]:
    """Captured vs candidate per metric. A timing row whose captured side came from a service-time
    model says so, and is not comparable: a model's latency against AIPerf's measured latency is
    no regression or gain."""
    timing = str(captured.get("timing_source", "modeled"))
    rows = []
    for label, c, m in COMPARISON_ROWS:
        is_timing = c[0] in TIMING_METRICS
        rows.append({"metric": label, "captured": _dig(captured, c), "candidate": _dig(measured, m),
                     "captured_timing_source": timing if is_timing else None,
                     "comparable": timing == "measured" if is_timing else True})
    return rows


def error_rate(measured: Mapping[str, Any] | None) -> tuple[int, int, float | None]:
    """(errors, requests sent, errors / sent): AIPerf counts successes in request_count and
    failures in its error summary."""
    if not measured:
        return 0, 0, None
    errors = int(measured.get("error_count") or 0)
    sent = int(measured.get("request_count") or 0) + errors
    return errors, sent, (errors / sent if sent else None)


def _status(outcome: RunOutcome, measured: Mapping[str, Any] | None,
            max_error_rate_pct: float) -> tuple[str, dict[str, Any] | None]:
    if outcome.failed:
        return "failed", {"kind": outcome.failure_kind, "reason": outcome.failure_reason,
                          "exit_code": outcome.exit_code}
    errors, sent, rate = error_rate(measured)
    if rate is None or rate * 100 <= max_error_rate_pct:
        return "succeeded", None
    reason = (f"{errors} of {sent} requests failed ({rate * 100:.1f} %), above the "
              f"{max_error_rate_pct:g} % threshold")
    # Nothing answered: the run measured no service at all.
    status = "failed" if errors == sent else "degraded"
    return status, {"kind": "error_rate", "reason": reason, "exit_code": outcome.exit_code,
                    "max_error_rate_pct": max_error_rate_pct}


def build_evidence(plan: ExecutionPlan, *, execution_id: str, started: datetime,
                   ended: datetime, outcome: RunOutcome,
                   build: Mapping[str, Any] | None = None,
                   max_error_rate_pct: float = DEFAULT_MAX_ERROR_RATE_PCT) -> dict[str, Any]:
    """The evidence document of one run with its canonical digest: `succeeded` only when the
    share of failed requests is at most `max_error_rate_pct`; above it `degraded` (or `failed`
    when no request succeeded)."""
    measured = None if outcome.failed or outcome.measured is None else dict(outcome.measured)
    captured = captured_figures(plan.trace.statistics, plan.trace.timing_source)
    status, failure = _status(outcome, measured, max_error_rate_pct)
    errors, sent, _ = error_rate(measured)
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "execution_id": execution_id,
        "evidence_class": EVIDENCE_CLASS,
        "method": plan.method,
        "status": status,
        "failure": failure,
        "error_count": errors,
        "request_count": sent,
        "source": {"trace_digest": plan.trace.digest, "deployment": plan.trace.deployment,
                   "trace_schema": plan.trace.schema,
                   "trace_evidence_class": plan.trace.evidence_class,
                   "sample_count": plan.trace.sample_count},
        "target": plan.target.to_document(),
        "aiperf": {"version": outcome.aiperf_version, "parameters": plan.parameters()},
        "started_at": rfc3339(started),
        "ended_at": rfc3339(ended),
        "requests_completed": outcome.requests_completed,
        "measured": measured,
        "captured": captured,
        "comparison": comparison(captured, measured),
        "fidelity": fidelity(plan, measured),
        "note": NOTE,
        "build": dict(build or {}),
    }
    document["digest"] = compute_digest(document)
    return document
