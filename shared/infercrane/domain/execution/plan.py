"""The plan of one execution: AIPerf's parameters derived from a trace document.

The `mean` schedule takes the trace's mean input/output sizes with their standard deviations and
its peak observed concurrency; the `trace` schedule, the trace's own arrivals and prefix
structure as mooncake rows.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from infercrane.domain.aiperf_export import mooncake_rows
from infercrane.domain.digest import compute_digest
from infercrane.errors import InvalidInput

Schedule = Literal["mean", "trace"]
METHODS: dict[str, str] = {"mean": "aiperf-mean-concurrency", "trace": "aiperf-trace-schedule"}
# Fixed so two runs of the same trace send the same synthetic prompts.
RANDOM_SEED = 42
ENDPOINT_TYPE = "chat"
# Sizes are counted in cl100k tokens, and AIPerf records per-request metrics, never the bodies
# (`raw` would store prompts and responses).
TOKENIZER = "cl100k_base"
EXPORT_LEVEL = "records"


# -- reading a trace ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceShape:
    """What an execution needs from a trace document."""

    digest: str
    deployment: str
    schema: str
    evidence_class: str
    sample_count: int
    statistics: Mapping[str, Any]
    records: Sequence[Mapping[str, Any]]
    timing_source: str = "modeled"  # the trace's label; anything not `observed` is not measured


def read_trace(trace: Mapping[str, Any]) -> TraceShape:
    if not isinstance(trace, Mapping):
        raise InvalidInput("The trace must be a JSON object.", field="trace")
    for name in ("digest", "deployment", "statistics", "records"):
        if name not in trace:
            raise InvalidInput("The trace document lacks a required field.", field=f"trace.{name}")
    if compute_digest(trace) != trace["digest"]:
        # The evidence names this digest as its source: it must be the document executed.
        raise InvalidInput("The trace document does not match its digest.", field="trace.digest")
    stats, records = trace["statistics"], trace["records"]
    if not isinstance(stats, Mapping) or not isinstance(records, list):
        raise InvalidInput("The trace's statistics or records are malformed.", field="trace")
    for i, record in enumerate(records):
        if not isinstance(record, Mapping) or not all(
                isinstance(record.get(k), int) and record.get(k) >= 0  # type: ignore[operator]
                for k in ("offset_ms", "input_tokens", "output_tokens")):
            raise InvalidInput("A trace record lacks offset_ms, input_tokens or output_tokens.",
                               field=f"trace.records.{i}")
    return TraceShape(str(trace["digest"]), str(trace["deployment"]),
                      str(trace.get("schema", "")), str(trace.get("evidence_class", "")),
                      int(trace.get("sample_count", len(records))), stats, records,
                      str(trace.get("timing_source", "modeled")))


def _stddev(values: Sequence[int]) -> float:
    """Population standard deviation (the spread of the captured sizes themselves)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / n)


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


# -- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    url: str
    model: str
    revision: str | None = None
    api_key_env: str | None = None

    def to_document(self) -> dict[str, Any]:
        # Credential-free by construction: the URL was checked, the key is only a variable name.
        return {"revision": self.revision, "url": self.url, "model": self.model,
                "api_key_env": self.api_key_env}


@dataclass(frozen=True)
class ExecutionPlan:
    schedule: Schedule
    method: str
    trace: TraceShape
    target: Target
    request_count: int
    concurrency: int | None  # None for the trace schedule: arrivals drive the load
    isl: int
    isl_stddev: float
    osl: int
    osl_stddev: float
    random_seed: int = RANDOM_SEED
    endpoint_type: str = ENDPOINT_TYPE
    streaming: bool = True
    time_scale: float | None = None
    max_duration_s: float | None = None
    rows: tuple[dict[str, Any], ...] = ()  # mooncake rows for the trace schedule
    block_size: int | None = None  # tokens per hash_id when the rows carry prefix blocks
    trace_isl_mean: float = 0.0
    trace_osl_mean: float = 0.0
    trace_peak_concurrency: int = 0

    @property
    def estimated_input_tokens(self) -> int:
        if self.rows:
            return sum(int(r["input_length"]) for r in self.rows)
        return self.isl * self.request_count

    @property
    def estimated_output_tokens(self) -> int:
        if self.rows:
            return sum(int(r["output_length"]) for r in self.rows)
        return self.osl * self.request_count

    def parameters(self) -> dict[str, Any]:
        """Exactly what AIPerf is given (the flags' values), credential-free."""
        params: dict[str, Any] = {
            "model": self.target.model, "url": self.target.url,
            "endpoint_type": self.endpoint_type, "streaming": self.streaming,
            "random_seed": self.random_seed, "tokenizer": TOKENIZER,
            "extra_inputs": {"ignore_eos": True}, "export_level": EXPORT_LEVEL,
            "request_count": self.request_count,
        }
        if self.schedule == "mean":
            params.update({"concurrency": self.concurrency, "isl": self.isl,
                           "isl_stddev": self.isl_stddev, "osl": self.osl,
                           "osl_stddev": self.osl_stddev})
        else:
            params.update({"custom_dataset_type": "mooncake_trace", "fixed_schedule": True,
                           "time_scale": self.time_scale, "max_duration_s": self.max_duration_s,
                           "input_rows": len(self.rows), "isl_block_size": self.block_size,
                           "input_digest": compute_digest({"rows": list(self.rows)})})
        return params

    def summary(self) -> dict[str, Any]:
        """What would run: shown before anything is sent."""
        return {"method": self.method, "schedule": self.schedule,
                "target": self.target.to_document(),
                "source_trace_digest": self.trace.digest,
                "request_count": self.request_count, "concurrency": self.concurrency,
                "isl": self.isl, "isl_stddev": self.isl_stddev,
                "osl": self.osl, "osl_stddev": self.osl_stddev,
                "time_scale": self.time_scale, "max_duration_s": self.max_duration_s,
                "estimated_input_tokens": self.estimated_input_tokens,
                "estimated_output_tokens": self.estimated_output_tokens}


def _trace_rows(trace: Mapping[str, Any], limit: int, time_scale: float | None,
                max_duration_s: float | None) -> list[dict[str, Any]]:
    """The trace's mooncake rows (the traces' own exporter), compressed by `time_scale` and cut
    at `max_duration_s` of compressed time. AIPerf 0.13's `--replay-speedup` is honoured only by
    its baseten loader, and `--synthesis-speedup-ratio` re-synthesizes prompts, so the timestamps
    are compressed here, in the file AIPerf reads."""
    rows: list[dict[str, Any]] = []
    for row in mooncake_rows(trace):
        if len(rows) >= limit:
            break
        stamp = float(row["timestamp"]) / (time_scale or 1.0)
        if max_duration_s is not None and stamp > max_duration_s * 1000:
            break
        rows.append({**row, "timestamp": int(stamp)})
    return rows


def _block_size(records: Sequence[Mapping[str, Any]]) -> int:
    """The one prefix block size of the trace's blocks: AIPerf builds each prompt from
    `--isl-block-size` tokens per hash_id (512 by default for mooncake), one size per run."""
    sizes = {r.get("prefix_block_size") for r in records if r.get("prefix_block_ids")}
    size = next(iter(sizes)) if len(sizes) == 1 else None
    if not isinstance(size, int) or size < 1:
        raise InvalidInput("The trace's prefix blocks must share one known block size to be "
                           "replayed with --schedule trace.", field="trace.records")
    return size


def plan_execution(trace: Mapping[str, Any], target: Target, *, schedule: Schedule = "mean",
                   max_requests: int | None = None, time_scale: float | None = None,
                   max_duration_s: float | None = None) -> ExecutionPlan:
    if schedule not in METHODS:
        raise InvalidInput("The schedule is mean or trace.", field="schedule")
    if max_requests is not None and max_requests < 1:
        raise InvalidInput("Is below the allowed minimum.", field="max_requests")
    if time_scale is not None and not (0 < time_scale <= 10_000):
        raise InvalidInput("The time scale is a speed-up factor above 0 (10 = ten times faster).",
                           field="time_scale")
    if max_duration_s is not None and max_duration_s <= 0:
        raise InvalidInput("Is below the allowed minimum.", field="max_duration")
    if schedule == "mean" and (time_scale is not None or max_duration_s is not None):
        raise InvalidInput("--time-scale and --max-duration apply to --schedule trace only.",
                           field="schedule")
    shape = read_trace(trace)
    if not shape.records:
        raise InvalidInput("The trace holds no requests: there is nothing to execute.",
                           field="trace.records")
    inputs = [int(r["input_tokens"]) for r in shape.records]
    outputs = [int(r["output_tokens"]) for r in shape.records]
    isl_mean, osl_mean = sum(inputs) / len(inputs), sum(outputs) / len(outputs)
    peak = int(shape.statistics.get("peak_concurrency") or 0)
    count = min(len(shape.records), max_requests or len(shape.records))
    rows: list[dict[str, Any]] = []
    concurrency: int | None = None
    block_size = None
    if schedule == "trace":
        rows = _trace_rows(trace, count, time_scale, max_duration_s)
        count = len(rows)
        block_size = _block_size(shape.records) if any("hash_ids" in r for r in rows) else None
    else:
        # More lanes than requests would never fill: the fidelity line shows the trace's peak.
        concurrency = max(1, min(peak, count))
    return ExecutionPlan(
        schedule=schedule, method=METHODS[schedule], trace=shape, target=target,
        request_count=count, concurrency=concurrency,
        isl=max(1, _round_half_up(isl_mean)), isl_stddev=round(_stddev(inputs), 3),
        osl=max(1, _round_half_up(osl_mean)), osl_stddev=round(_stddev(outputs), 3),
        time_scale=time_scale, max_duration_s=max_duration_s, rows=tuple(rows),
        block_size=block_size,
        trace_isl_mean=isl_mean, trace_osl_mean=osl_mean, trace_peak_concurrency=peak)


def new_execution_id() -> str:
    return "exe_" + secrets.token_hex(12)
