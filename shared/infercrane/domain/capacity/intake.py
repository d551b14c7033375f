"""Lifecycle attempts as submitted (`AttemptIn`): the checks of each item and the results of a
batch, by `domain/batch.py`'s contract (limit, envelope, item errors and codes). Only ingest
loads this module (its pydantic model is built at import): the aggregator and reports
read stored attempts (`attempts.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from infercrane.domain.batch import (
    MISSING,
    OUT_OF_RANGE,
    ItemError,
    batch_items,
    not_an_object,
    schema_refusals,
)
from infercrane.domain.batch import IngestResult as BatchResult
from infercrane.domain.capacity.attempts import StoredAttempt, classify_attempt
from infercrane.domain.validation import (
    ID_PATTERN,
    MAX_FUTURE,
    NAME_PATTERN,
    SHORT_NAME_PATTERN,
    TIME_RANGE_SENTENCE,
    StorableText,
    plain_keys,
    within_bounds,
)
from infercrane.domain.windows import epoch_ms, from_epoch_ms

Outcome = Literal["succeeded", "failed", "cancelled"]
# How far started_at may run ahead of our clock (a producer's clock skew). Not validation's
# MAX_FUTURE (a day, which finished_at keeps): an attempt cannot have started in the future.
MAX_START_SKEW_MS = 5 * 60_000
MAX_START_SKEW = timedelta(milliseconds=MAX_START_SKEW_MS)

_NAME = SHORT_NAME_PATTERN  # also safe inside keys: no '#' and no '|'


class AttemptIn(BaseModel):
    """One lifecycle attempt as submitted (HTTP, control-plane events, JSONL import)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    attempt_id: str = Field(pattern=ID_PATTERN)
    deployment: str = Field(pattern=NAME_PATTERN)
    operation: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    adapter: Literal["aws", "gcp", "kubernetes"]
    runtime: str = Field(pattern=_NAME)
    compute_mode: str = Field(pattern=_NAME)
    region: str = Field(pattern=_NAME)
    zone: str | None = Field(default=None, pattern=_NAME)
    gpu: str = Field(pattern=_NAME)
    gpu_count: int = Field(ge=0, le=4096)
    started_at: AwareDatetime
    finished_at: AwareDatetime | None = None
    outcome: Outcome
    # The provider's code is an identifier (`InsufficientInstanceCapacity`, `QUOTA_EXCEEDED`,
    # `scale.up.error.out.of.resources`, `8`); its message is the one free text the service keeps.
    error_code: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
    error_message: StorableText | None = Field(default=None, max_length=4096)


@dataclass
class IngestResult(BatchResult):
    new: int = 0  # accepted items that were not stored before (re-sends change nothing)


# An item's schema fields: an item holding only these is not lower-cased key by key when it is
# searched for body-like keys (only refused items are).
_PLAIN_KEYS = plain_keys(AttemptIn.model_fields)


def validate_attempt(tenant: str, index: int, raw: Any, now_ms: int, classify: Callable[..., Any],
                     version: str) -> StoredAttempt | list[ItemError]:
    """The attempt to store, or why not: each body-like key the item holds, else its first error
    (`domain/batch.py`'s codes)."""
    if not isinstance(raw, Mapping):
        return [not_an_object(index, "attempt")]
    try:
        item = AttemptIn.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False, include_context=False)[0]
        return schema_refusals(index, raw, first, _PLAIN_KEYS)
    now = from_epoch_ms(now_ms)
    # started_at may run ahead of our clock by the skew; finished_at by the default day.
    for name, future in (("started_at", MAX_START_SKEW), ("finished_at", MAX_FUTURE)):
        moment = getattr(item, name)
        if moment is not None and not within_bounds(moment, now, future):
            return [ItemError(index, name, OUT_OF_RANGE, TIME_RANGE_SENTENCE)]
    started = epoch_ms(item.started_at)
    finished = epoch_ms(item.finished_at) if item.finished_at is not None else None
    if finished is not None and finished < started:
        return [ItemError(index, "finished_at", OUT_OF_RANGE, "Must not be before started_at.")]
    if item.outcome == "succeeded" and finished is None:
        return [ItemError(index, "finished_at", MISSING,
                          "A succeeded attempt needs finished_at.")]
    stored = StoredAttempt(
        tenant=tenant, attempt_id=item.attempt_id, deployment=item.deployment,
        operation=item.operation, adapter=item.adapter, runtime=item.runtime,
        compute_mode=item.compute_mode, region=item.region, zone=item.zone, gpu=item.gpu,
        gpu_count=item.gpu_count, started_at_ms=started, finished_at_ms=finished,
        outcome=item.outcome, error_code=item.error_code, error_message=item.error_message,
        received_at_ms=now_ms, failure_class=None, persistent=False, rule=None,
        classifier_version=version)
    return classify_attempt(stored, classify, version)


def batch_of(body: Any) -> list[Any]:
    """The attempts of a batch document `{"items": [...]}` (an HTTP body, a control-plane detail),
    by `domain/batch.py`'s contract."""
    return batch_items(body, "attempts")
