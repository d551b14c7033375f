"""AIPerf's formats: the `aiperf profile` command line a plan becomes, the mooncake_trace input
file of the trace schedule, and AIPerf's summary (`profile_export_aiperf.json`) read back as the
evidence's measured figures.

The domain speaks of a plan and of measured figures in its own terms
(`infercrane.domain.execution`); this module is the one place that knows AIPerf's flag names and
summary keys, so an AIPerf upgrade that renames either changes only this file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from infercrane.domain.execution import ExecutionPlan
from infercrane.domain.execution.evidence import finite_or_none
from infercrane.domain.execution.plan import EXPORT_LEVEL, TOKENIZER


def profile_args(plan: ExecutionPlan, artifact_dir: str, input_file: str | None = None,
                 with_api_key: str | None = None) -> list[str]:
    """`aiperf profile` arguments (the runner adds the executable)."""
    args = ["profile", "--model", plan.target.model, "--url", plan.target.url,
            "--endpoint-type", plan.endpoint_type, "--streaming",
            "--tokenizer", TOKENIZER, "--random-seed", str(plan.random_seed),
            "--extra-inputs", "ignore_eos:true",
            "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry",
            "--export-level", EXPORT_LEVEL, "--artifact-dir", artifact_dir]
    if plan.schedule == "mean":
        args += ["--concurrency", str(plan.concurrency),
                 "--request-count", str(plan.request_count),
                 "--isl", str(plan.isl), "--isl-stddev", _num(plan.isl_stddev),
                 "--osl", str(plan.osl), "--osl-stddev", _num(plan.osl_stddev)]
    else:
        if input_file is None:
            raise ValueError("the trace schedule needs its mooncake input file")
        args += ["--input-file", input_file, "--custom-dataset-type", "mooncake_trace",
                 "--fixed-schedule", "--request-count", str(plan.request_count)]
        if plan.block_size is not None:
            args += ["--isl-block-size", str(plan.block_size)]
    if with_api_key is not None:
        args += ["--api-key", with_api_key]
    return args


def _num(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


def input_jsonl(plan: ExecutionPlan) -> str:
    """The trace schedule's `--input-file`: the plan's rows, one JSON object a line."""
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in plan.rows)


def _metric(summary: Mapping[str, Any], name: str,
            stats: Sequence[str] = ("avg", "p50", "p95", "p99")) -> dict[str, float | None] | None:
    metric = summary.get(name)
    if not isinstance(metric, Mapping):
        return None
    return {s: finite_or_none(metric.get(s)) for s in stats}


def _scalar(summary: Mapping[str, Any], name: str) -> float | None:
    metric = summary.get(name)
    return finite_or_none(metric.get("avg")) if isinstance(metric, Mapping) else finite_or_none(metric)


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
    """AIPerf's summary as the evidence's `measured` block."""
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
