"""A run's outcome and the evidence document built from it (`infercrane.replay.execution/v1`):
measured and captured figures side by side, the fidelity of the approximation, and the status
the share of failed requests gives.
"""

from __future__ import annotations

import math
import re
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
    """What the load generator reports. `summary` is AIPerf's profile_export_aiperf.json."""

    exit_code: int | None
    summary: Mapping[str, Any] | None
    aiperf_version: str | None
    failure_kind: FailureKind | None = None
    failure_reason: str | None = None
    requests_completed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.failure_kind is not None


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _metric(summary: Mapping[str, Any], name: str,
            stats: Sequence[str] = ("avg", "p50", "p95", "p99")) -> dict[str, float | None] | None:
    metric = summary.get(name)
    if not isinstance(metric, Mapping):
        return None
    return {s: _finite(metric.get(s)) for s in stats}


def _scalar(summary: Mapping[str, Any], name: str) -> float | None:
    metric = summary.get(name)
    return _finite(metric.get("avg")) if isinstance(metric, Mapping) else _finite(metric)


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)


def _errors(summary: Mapping[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """Error counts by type/code only: error messages may quote a server's response."""
    total, kinds = 0, []
    for entry in summary.get("error_summary") or []:
        if not isinstance(entry, Mapping):
            continue
        count = int(entry.get("count") or 0)
        inner = entry.get("error_details")
        details: Mapping[str, Any] = inner if isinstance(inner, Mapping) else entry
        total += count
        # An identifier only: AIPerf's type names; anything else is reduced to its charset.
        kind = re.sub(r"[^A-Za-z0-9._:-]", "_", str(details.get("type") or "unknown"))[:80]
        kinds.append({"type": kind if kind[0].isalnum() else "unknown",
                      "code": details.get("code") if isinstance(details.get("code"), int)
                      else None, "count": count})
    return total, kinds


def measured_figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    error_count, error_kinds = _errors(summary)
    return {
        "time_to_first_token_ms": _metric(summary, "time_to_first_token"),
        "inter_token_latency_ms": _metric(summary, "inter_token_latency"),
        "request_latency_ms": _metric(summary, "request_latency"),
        "input_sequence_length": _metric(summary, "input_sequence_length",
                                         ("avg", "p50", "p95", "max")),
        "output_sequence_length": _metric(summary, "output_sequence_length",
                                          ("avg", "p50", "p95", "max")),
        "request_throughput_per_s": _scalar(summary, "request_throughput"),
        "output_token_throughput_per_s": _scalar(summary, "output_token_throughput"),
        "input_token_throughput_per_s": _scalar(summary, "input_token_throughput"),
        "request_count": _count(_scalar(summary, "request_count")),
        "error_count": error_count,
        "errors": error_kinds,
        "request_error_rate_pct": _scalar(summary, "request_error_rate"),
        "effective_concurrency": _scalar(summary, "effective_concurrency"),
        "benchmark_duration_s": _scalar(summary, "benchmark_duration"),
        "was_cancelled": bool(summary.get("was_cancelled")),
        "is_complete": bool(summary.get("is_complete", True)),
        "timing_source": "measured",  # AIPerf timed these requests itself
    }


def side_timing(trace_timing_source: str) -> str:
    """A side's timing label: `measured` only when the trace's timing was observed."""
    return "measured" if trace_timing_source == "observed" else "modeled"


def captured_figures(stats: Mapping[str, Any], timing_source: str = "modeled") -> dict[str, Any]:
    def pick(name: str, keys: Sequence[str]) -> dict[str, Any] | None:
        value = stats.get(name)
        return {k: _finite(value.get(k)) for k in keys} if isinstance(value, Mapping) else None

    return {"ttft_ms": pick("ttft_ms", ("p50", "p95")),
            "latency_ms": pick("latency_ms", ("p50", "p95")),
            "input_tokens": pick("input_tokens", ("mean", "p50", "p95", "max")),
            "output_tokens": pick("output_tokens", ("mean", "p50", "p95", "max")),
            "request_rate_per_s": _finite(stats.get("request_rate_per_s")),
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
    measured = None if outcome.failed or outcome.summary is None \
        else measured_figures(outcome.summary)
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
