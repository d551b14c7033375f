"""The observation as clients submit it (`ObservationIn`), its limits and its checks across
fields; query times (`parse_time`) and the batch envelope as capture words it (`batch_items`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from infercrane.domain import batch
from infercrane.domain.observation import Outcome, Source, TimingSource
from infercrane.domain.validation import (
    DIGEST,
    ID_PATTERN,
    NAME_PATTERN,
    TIME_RANGE_SENTENCE,
    body_keys,
    check_time,
    plain_keys,
)
from infercrane.errors import InvalidInput

MAX_TOKENS = 10_000_000
MAX_LATENCY_MS = 86_400_000.0  # 24 h
MAX_PREFIX_BLOCKS = 4096  # 2M tokens at 512-token blocks; keeps an item well under 400 KB

# `<import format>:sha256:<file digest>`: which reader made the item from which file, nothing else.
PROVENANCE_PATTERN = rf"^(azure-csv|mooncake-jsonl|otlp-json|jsonl):{DIGEST}$"
MAX_MODEL_PARAMETER = 1e6

IDENTITY_FIELDS = ("session_id", "parent_session_id", "shared_prefix_id")
IdentityMode = Literal["raw", "pseudonymized"]


class TimingModelIn(BaseModel):
    """The parameters of the service-time model that produced modelled timing (`linear-v1`:
    ttft = overhead + prefill x input tokens; latency = ttft + decode x output tokens). Closed:
    named numbers only, so nothing else can ride along into observations and trace documents."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, frozen=True)

    name: Literal["linear-v1"]
    overhead_ms: float = Field(ge=0, le=MAX_MODEL_PARAMETER, allow_inf_nan=False)
    prefill_ms_per_token: float = Field(ge=0, le=MAX_MODEL_PARAMETER, allow_inf_nan=False)
    decode_ms_per_token: float = Field(ge=0, le=MAX_MODEL_PARAMETER, allow_inf_nan=False)


class ObservationIn(BaseModel):
    """One observation as clients send it (REST items, queue messages, imports)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, frozen=True)

    observation_id: str | None = Field(default=None, pattern=ID_PATTERN)
    deployment: str = Field(pattern=NAME_PATTERN)
    revision: str | None = Field(default=None, pattern=NAME_PATTERN)
    arrival: AwareDatetime
    input_tokens: int = Field(ge=0, le=MAX_TOKENS)
    output_tokens: int = Field(ge=0, le=MAX_TOKENS)
    cached_input_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    ttft_ms: float | None = Field(default=None, ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)
    latency_ms: float = Field(ge=0, le=MAX_LATENCY_MS, allow_inf_nan=False)
    outcome: Outcome = "ok"
    streaming: StrictBool = False
    sampling_rate: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    source: Source = "captured"
    provenance: str | None = Field(default=None, pattern=PROVENANCE_PATTERN)
    timing_source: TimingSource = "observed"
    timing_model: TimingModelIn | None = None
    session_id: str | None = Field(default=None, min_length=1, max_length=512)
    parent_session_id: str | None = Field(default=None, min_length=1, max_length=512)
    shared_prefix_id: str | None = Field(default=None, min_length=1, max_length=512)
    prefix_block_ids: list[str | int] | None = Field(default=None, max_length=MAX_PREFIX_BLOCKS)
    prefix_block_size: int | None = Field(default=None, ge=1, le=1_000_000)


# Every key an item's schema defines: an item holding only these is not lower-cased key by key
# in the body-field check (its nested values are still walked).
_PLAIN_KEYS = plain_keys([*ObservationIn.model_fields, *TimingModelIn.model_fields])


def body_fields(item: Mapping[str, Any]) -> list[str]:
    """The body-like key names anywhere in the item (the values are never looked at)."""
    return body_keys(item, _PLAIN_KEYS)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def _epoch_ms(dt: datetime) -> int:
    # Exact integer arithmetic: arrival precision is the millisecond, truncated, never rounded.
    return (dt - _EPOCH) // _MILLISECOND


def _cross_check(fields: Mapping[str, Any], blocks: list[str] | None, arrival_us: int,
                 bounds: tuple[int, int]) -> tuple[str, str, str] | None:
    """(field, code, message) of the first rule a validated item (`fields`: its values by field
    name) breaks across fields, or None."""
    ttft, cached = fields["ttft_ms"], fields["cached_input_tokens"]
    if ttft is not None and ttft > fields["latency_ms"]:
        return "ttft_ms", "out_of_range", "Time to first token cannot exceed the latency."
    if cached is not None and cached > fields["input_tokens"]:
        return "cached_input_tokens", "out_of_range", "Cached input tokens cannot exceed input tokens."
    if not bounds[0] <= arrival_us <= bounds[1]:  # `within_bounds`, as integers
        return "arrival", "out_of_range", TIME_RANGE_SENTENCE
    if blocks is not None:
        if fields["prefix_block_size"] is None:
            return "prefix_block_size", "missing", "Prefix blocks need their block size in tokens."
        if blocks and (min(map(len, blocks)) == 0 or max(map(len, blocks)) > 128):
            return "prefix_block_ids", "out_of_range", "Each prefix block id is 1-128 characters."
    if fields["source"] == "imported" and not fields["provenance"]:
        return "provenance", "missing", "Imported observations need their provenance."
    if fields["timing_source"] == "modeled" and not fields["timing_model"]:
        return "timing_model", "missing", "Modelled timing needs the model's parameters."
    return None


_TIME: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)


def parse_time(value: str, field_name: str) -> datetime:
    """An RFC 3339 timestamp with a timezone (query parameters such as `before`)."""
    try:
        moment = _TIME.validate_python(value)
    except ValidationError:
        raise InvalidInput("Must be an RFC 3339 timestamp with a timezone (use Z for UTC).",
                           field=field_name) from None
    return check_time(moment, field_name)


def batch_items(document: Any) -> list[Any]:
    """The observations of a batch request `{"items": [...]}` (`domain/batch.py`'s contract);
    whole-request problems raise."""
    return batch.batch_items(document, "observations")
