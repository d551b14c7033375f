"""Prepare: one item validated, its identities pseudonymized (or checked, on the queue), its
fingerprint taken, its stored form built (`build`), or the reasons it is refused (never echoing a
value). A `_Batch` holds what a request's items share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import rfc8785
from pydantic import ValidationError

from infercrane.domain import batch as contract
from infercrane.domain.batch import ItemError
from infercrane.domain.capture.fingerprint import _canonical
from infercrane.domain.capture.items import (
    _PLAIN_KEYS,
    IDENTITY_FIELDS,
    IdentityMode,
    ObservationIn,
    TimingModelIn,
    _cross_check,
    _epoch_ms,
)
from infercrane.domain.identity import PSEUDONYM_RE, fingerprinter, pseudonymizer
from infercrane.domain.observation import StoredObservation
from infercrane.domain.tenancy import KeySet
from infercrane.domain.validation import bounds_us, epoch_us


@dataclass(frozen=True)
class _Refusal:
    field: str
    code: str
    message: str


@dataclass
class _Identities:
    """Pseudonymizes (raw mode) or checks (pseudonymized mode) the identities of one batch's
    items; the tenant's keys are read once per batch, and only if an item needs them.

    A raw id is HMAC'd once per batch: sessions span turns and shared prefixes (system prompts,
    prefix blocks) span requests, so a batch repeats most of its ids. The memo lives as long as
    the request, holds nothing the items do not, and is bounded."""

    mode: IdentityMode
    keys: Callable[[], KeySet]
    _fingerprint: Callable[[bytes], str] | None = None
    _pseudonym: Callable[[str], str] | None = None
    # Raw identities: never in a repr (a log line or a test's locals must not print them).
    _memo: dict[str, str] = field(default_factory=dict, repr=False)

    def _pseudonymize(self, raw: str) -> str:
        value = self._memo.get(raw)
        if value is None:
            pseudonym = self._pseudonym
            if pseudonym is None:
                pseudonym = self._pseudonym = pseudonymizer(self.keys())
            value = pseudonym(raw)
            if len(self._memo) < _MEMO_IDS:
                self._memo[raw] = value
        return value

    def fingerprint(self, content: bytes) -> str:
        if self._fingerprint is None:
            self._fingerprint = fingerprinter(self.keys())
        return self._fingerprint(content)

    def apply(self, named: tuple[str | None, str | None, str | None], blocks: list[str] | None
              ) -> tuple[_Stored, str | None] | _Refusal:
        """(stored identities, key version), or why they are refused. `named` holds the values
        of `IDENTITY_FIELDS`, in that order, as given; the stored identities are those three and
        the prefix blocks."""
        session, parent, shared = named
        if blocks is None and session is None and parent is None and shared is None:
            return _NO_IDENTITIES, None
        if self.mode == "raw":
            pseudonym = self._pseudonymize
            return (None if session is None else pseudonym(session),
                    None if parent is None else pseudonym(parent),
                    None if shared is None else pseudonym(shared),
                    None if blocks is None else tuple(map(pseudonym, blocks))), self.keys().current
        keys = self.keys()
        versions: set[str] = set()
        for name, value in [*zip(IDENTITY_FIELDS, named, strict=True),
                            *(("prefix_block_ids", b) for b in blocks or ())]:
            if value is None:
                continue
            m = PSEUDONYM_RE.match(value)
            if m is None:
                return _Refusal(name, "identity_not_pseudonymized", "Identities on the queue "
                                "must be HMACs made at the edge (v<N>:<64 hex>).")
            if m.group(1) not in keys.keys:
                return _Refusal(name, "unknown_key_version", "The identity key version is unknown.")
            versions.add(m.group(1))
        if len(versions) > 1:
            return _Refusal("key_version", "mixed_key_versions",
                            "All identities of one observation use one key version.")
        # No version when the only identity is an empty block list: nothing on the queue was
        # made with a key. (Raw mode records the current version as it does for every item that
        # names an identity field; stored values pinned by tests/fixtures/capture.)
        return (session, parent, shared, None if blocks is None else tuple(blocks)), \
            next(iter(versions), None)


# Stored identities: session, parent session, shared prefix (pseudonyms) and prefix blocks.
_Stored = tuple[str | None, str | None, str | None, tuple[str, ...] | None]
_NO_IDENTITIES: _Stored = (None, None, None, None)
# Distinct raw ids one batch remembers the pseudonyms of (about 1-2 MB at the schema's longest
# ids, for the request's lifetime only); past that each is HMAC'd as it comes.
_MEMO_IDS = 4096


@dataclass
class _Batch:
    """What every item of one request shares: the tenant, its keys, the time of ingest, and the
    canonical text of each distinct timing model (an import sends the same one on every row)."""

    tenant: str
    identities: _Identities = field(repr=False)  # holds raw identities (its memo)
    now: datetime
    now_ms: int = field(init=False)  # `now` in epoch ms, computed once per batch
    bounds_us: tuple[int, int] = field(init=False)  # arrivals accepted, as `epoch_us`
    timing_models: dict[TimingModelIn, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.now_ms = _epoch_ms(self.now)
        self.bounds_us = bounds_us(self.now)

    def timing_model(self, model: TimingModelIn) -> str:
        text = self.timing_models.get(model)
        if text is None:
            text = self.timing_models[model] = rfc8785.dumps(model.model_dump()).decode()
        return text


# `ObservationIn.model_validate` without its Python wrapper (argument handling, per item).
_validate_observation: Callable[[Any], ObservationIn] = \
    ObservationIn.__pydantic_validator__.validate_python


def _refusals(index: int, item: Mapping[str, Any], exc: ValidationError) -> list[ItemError]:
    """Why the schema refused an item: each body-like key it holds, else the schema's first
    error."""
    first = exc.errors(include_input=False, include_url=False, include_context=False)[0]
    return contract.schema_refusals(index, item, first, _PLAIN_KEYS)


def build(batch: _Batch, index: int, item: Any) -> StoredObservation | list[ItemError]:
    """Validate one item and build its stored form, or say why not (never echoing a value)."""
    if type(item) is not dict and not isinstance(item, Mapping):
        return [contract.not_an_object(index, "observation")]
    # The schema first, the body-key walk only for an item it refuses: an item it accepts holds
    # schema keys alone, at every depth (every model forbids extra keys and no field takes
    # free-form ones, tests/unit/test_capture_fast_paths.py holds the schema to that), and
    # `plain_keys` refuses a body-like schema key, so it cannot hold a body field. The walk was
    # a twentieth of capture's CPU per valid item (make bench, group `capture`). The schema
    # does read a refused item's values, but its errors never carry them (`hide_input_in_errors`,
    # `include_input=False`).
    try:
        obs = _validate_observation(item)
    except ValidationError as exc:
        return _refusals(index, item, exc)
    # The validated values, read from the instance dict (the schema fills in every field,
    # defaults included): pydantic's models define `__getattr__`, which keeps each attribute read
    # off CPython's fast path, and an item takes about 40 (~1 us/obs, make bench, group `capture`).
    fields: dict[str, Any] = obs.__dict__
    raw_blocks = fields["prefix_block_ids"]
    blocks = None if raw_blocks is None else [str(b) for b in raw_blocks]
    arrival_us = epoch_us(fields["arrival"])
    broken = _cross_check(fields, blocks, arrival_us, batch.bounds_us)
    if broken is not None:
        return [ItemError(index, *broken)]
    named = (fields["session_id"], fields["parent_session_id"], fields["shared_prefix_id"])
    applied = batch.identities.apply(named, blocks)
    if isinstance(applied, _Refusal):
        return [ItemError(index, applied.field, applied.code, applied.message)]
    (session, parent, shared, stored_blocks), key_version = applied
    arrival_ms = arrival_us // 1000  # truncated to the millisecond, never rounded
    # Floats: the schema makes 850 into 850.0, so `_canonical`'s float text applies.
    latency, rate, ttft = fields["latency_ms"], fields["sampling_rate"], fields["ttft_ms"]
    model = batch.timing_model(fields["timing_model"]) if fields["timing_model"] else None
    block_size = fields["prefix_block_size"] if blocks is not None else None
    # What the observation *is*: its shape and its identities as the client gave them (raw ids,
    # or the edge's pseudonyms on the queue), under the tenant's non-rotating fingerprint key
    # (domain/identity.py). Neither the identity key version nor the pseudonyms it made take
    # part, so a rotation cannot make a re-sent item look new; the observation_id does not
    # either, so one id can be checked against one content.
    digest = batch.identities.fingerprint(_canonical(
        arrival_ms, fields["deployment"], fields["input_tokens"], latency, fields["outcome"],
        fields["output_tokens"], rate, fields["source"], fields["streaming"],
        fields["timing_source"], cached_input_tokens=fields["cached_input_tokens"],
        parent_session_id=named[1], prefix_block_ids=blocks, prefix_block_size=block_size,
        provenance=fields["provenance"], revision=fields["revision"], session_id=named[0],
        shared_prefix_id=named[2], timing_model=model, ttft_ms=ttft))
    # Without a gateway id the content is the id, so a re-sent item is a no-op (before and after
    # a rotation). A gateway id names one observation: its fingerprint travels with it so the
    # store can refuse the same id with other content.
    named_id = fields["observation_id"]
    return StoredObservation.from_fields({
        "tenant": batch.tenant, "deployment": fields["deployment"],
        "observation_id": named_id or "h-" + digest[:32], "arrival_ms": arrival_ms,
        "input_tokens": fields["input_tokens"], "output_tokens": fields["output_tokens"],
        "latency_ms": latency, "outcome": fields["outcome"], "streaming": fields["streaming"],
        "sampling_rate": rate, "source": fields["source"], "ingested_at_ms": batch.now_ms,
        "revision": fields["revision"], "cached_input_tokens": fields["cached_input_tokens"],
        "ttft_ms": ttft, "provenance": fields["provenance"],
        "timing_source": fields["timing_source"], "timing_model": model, "session_id": session,
        "parent_session_id": parent, "shared_prefix_id": shared,
        "prefix_block_ids": stored_blocks, "prefix_block_size": block_size,
        "key_version": key_version, "fingerprint": digest if named_id else None})
