"""Capture: the one ingest function behind every path (REST batch, OTLP, queue, importers).

Each item is validated on its own and either becomes a `StoredObservation` or an `ItemError`;
valid items are stored, invalid ones are not. Bodies never enter: an item holding a body-like
key at any depth is refused naming those keys, before any other error it has, and no message here
ever contains a submitted value.
Identities are pseudonymized with the tenant's identity key (`identities="raw"`, REST and OTLP)
or must already be pseudonyms made at the edge (`identities="pseudonymized"`, the queue).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

import rfc8785
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from infercrane.clock import utcnow
from infercrane.domain import signing
from infercrane.domain.identity import PSEUDONYM_RE, fingerprinter, pseudonymizer
from infercrane.domain.observation import (
    STORE_REFUSALS,
    Outcome,
    Source,
    StoredObservation,
    TimingSource,
)
from infercrane.domain.otlp import OTLP_FIELD, OtlpOptions, map_document
from infercrane.domain.tenancy import TENANT_RE, Keyring, KeySet
from infercrane.domain.validation import (
    BODY_FIELD_SENTENCE,
    DIGEST,
    ID_PATTERN,
    NAME_PATTERN,
    NAME_RE,
    TIME_RANGE_SENTENCE,
    body_keys,
    bounds_us,
    check_time,
    closed_envelope,
    epoch_us,
    error_location,
    fixed_sentence,
    plain_keys,
)
from infercrane.errors import (
    BadRequest,
    DependencyUnavailable,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
)
from infercrane.ports.observations import ObservationStore, WriteStats
from infercrane.ports.secrets import KeyringStore

log = logging.getLogger(__name__)

MAX_BATCH = 500
MAX_TOKENS = 10_000_000
MAX_LATENCY_MS = 86_400_000.0  # 24 h
MAX_PREFIX_BLOCKS = 4096  # 2M tokens at 512-token blocks; keeps an item well under 400 KB

# `<import format>:sha256:<file digest>`: which reader made the item from which file, nothing else.
PROVENANCE_PATTERN = rf"^(azure-csv|mooncake-jsonl|otlp-json|jsonl):{DIGEST}$"
MAX_MODEL_PARAMETER = 1e6

IDENTITY_FIELDS = ("session_id", "parent_session_id", "shared_prefix_id")
IdentityMode = Literal["raw", "pseudonymized"]


class MalformedRequest(BadRequest):
    """A request body that cannot be read at all (not JSON, not protobuf): HTTP 400."""

    code = "invalid_json"


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


@dataclass(frozen=True)
class ItemError:
    index: int
    field: str | None
    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IngestResult:
    accepted: int = 0
    rejected: int = 0
    errors: list[ItemError] = field(default_factory=list)
    stats: WriteStats = field(default_factory=lambda: WriteStats(0, 0, 0))

    def to_json(self) -> dict[str, Any]:
        # `stored` + `already_present` = accepted: a re-sent item is accepted but not new.
        return {"accepted": self.accepted, "rejected": self.rejected,
                "stored": self.stats.items, "already_present": self.stats.skipped,
                "errors": [e.to_json() for e in self.errors]}


@dataclass
class OtlpResult(IngestResult):
    spans: int = 0
    ignored_spans: int = 0
    dropped_attributes: int = 0
    dropped_content_attributes: int = 0

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        doc.update(spans=self.spans, ignored_spans=self.ignored_spans,
                   dropped_attributes=self.dropped_attributes,
                   dropped_content_attributes=self.dropped_content_attributes)
        if self.rejected:
            # OTLP's own partial-success shape, so collectors log the rejection.
            doc["partialSuccess"] = {"rejectedSpans": self.rejected,
                                     "errorMessage": "Some spans were rejected; see errors."}
        return doc


_TIME: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)


# -- validation ---------------------------------------------------------------------------------

_CODES = {"missing": "missing", "extra_forbidden": "unknown_field"}
_RANGE = {"greater_than_equal", "greater_than", "less_than_equal", "less_than", "too_long",
          "too_short", "string_too_short", "string_too_long"}


def _pydantic_error(index: int, err: Mapping[str, Any]) -> ItemError:
    kind = str(err.get("type", ""))
    loc = error_location(err)
    if kind in _CODES:
        code = _CODES[kind]
    elif kind in _RANGE:
        code = "out_of_range"
    elif kind in ("string_pattern_mismatch", "literal_error") or kind.startswith("datetime") \
            or kind == "timezone_aware":
        code = "invalid_format"
    else:
        code = "invalid_type"
    return ItemError(index, loc, code, fixed_sentence(kind))


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

# -- the fingerprint's canonical form -------------------------------------------------------------

_json_string = json.encoder.encode_basestring  # the C escaper of json.dumps(ensure_ascii=False)
# Numbers are written by the `repr` and `str` builtins, which a type's own method would only slow
# (~40 ns a number): the schema hands over exact ints and floats (a bool, an int subclass or an
# integral float sent for a count arrives as an int, anything sent for a float as a float;
# tests/unit/test_capture_fingerprint.py holds it to that), and on those the builtins print what
# `int.__repr__` and `float.__repr__` print.
# The enums' values, escaped once.
_JSON_LITERALS = {v: _json_string(v) for v in (*get_args(Outcome), *get_args(Source),
                                               *get_args(TimingSource))}


def _jcs_number(value: float) -> str:
    """A float's RFC 8785 text: computed here where it is sure to equal the reference's, by the
    `rfc8785` library (the reference) otherwise. In [1e-4, 1e16) Python's `repr` is positional
    with the shortest round-trip digits, exactly as ECMAScript's Number::toString, except that
    an integral value ends in `.0`, which JCS drops."""
    if 1e-4 <= value < 1e16:  # `_canonical` inlines this case
        return repr(value).removesuffix(".0")
    if value == 0:  # 0.0 and -0.0 alike
        return "0"
    return rfc8785.dumps(value).decode("utf-8")


def _canonical(arrival_ms: int, deployment: str, input_tokens: int, latency_ms: float,
               outcome: str, output_tokens: int, sampling_rate: float, source: str,
               streaming: bool, timing_source: str, cached_input_tokens: int | None = None,
               parent_session_id: str | None = None, prefix_block_ids: list[str] | None = None,
               prefix_block_size: int | None = None, provenance: str | None = None,
               revision: str | None = None, session_id: str | None = None,
               shared_prefix_id: str | None = None, timing_model: str | None = None,
               ttft_ms: float | None = None) -> bytes:
    """RFC 8785 bytes of the fingerprint content (an absent optional is left out), written
    member by member in JCS order (these ASCII names sort the same by code point as by UTF-16
    unit): no dict to build and sort, no encoder to set up, per observation.

    Strings escape as the reference escapes them (the short escapes, other controls as lowercase
    \\u00XX, everything else literal); ints print alike inside 2**53, which the schema keeps
    every count and arrival far within; numbers as `_jcs_number`. A lone surrogate cannot be
    UTF-8: the reference then refuses the content and says why.
    `tests/unit/test_capture_fingerprint.py` checks byte identity against `rfc8785`."""
    text = "".join((
        '{"arrival_ms":', str(arrival_ms),
        "" if cached_input_tokens is None else ',"cached_input_tokens":' + str(cached_input_tokens),
        ',"deployment":', _json_string(deployment),
        ',"input_tokens":', str(input_tokens),
        ',"latency_ms":', repr(latency_ms).removesuffix(".0")
        if 1e-4 <= latency_ms < 1e16 else _jcs_number(latency_ms),
        ',"outcome":', _JSON_LITERALS.get(outcome) or _json_string(outcome),
        ',"output_tokens":', str(output_tokens),
        "" if parent_session_id is None else ',"parent_session_id":'
        + _json_string(parent_session_id),
        "" if prefix_block_ids is None else ',"prefix_block_ids":['
        + ",".join(map(_json_string, prefix_block_ids)) + "]",
        "" if prefix_block_size is None else ',"prefix_block_size":' + str(prefix_block_size),
        "" if provenance is None else ',"provenance":' + _json_string(provenance),
        "" if revision is None else ',"revision":' + _json_string(revision),
        ',"sampling_rate":', repr(sampling_rate).removesuffix(".0")
        if 1e-4 <= sampling_rate < 1e16 else _jcs_number(sampling_rate),
        "" if session_id is None else ',"session_id":' + _json_string(session_id),
        "" if shared_prefix_id is None else ',"shared_prefix_id":' + _json_string(shared_prefix_id),
        ',"source":', _JSON_LITERALS.get(source) or _json_string(source),
        ',"streaming":', "true" if streaming else "false",
        "" if timing_model is None else ',"timing_model":' + _json_string(timing_model),
        ',"timing_source":', _JSON_LITERALS.get(timing_source) or _json_string(timing_source),
        "" if ttft_ms is None else ',"ttft_ms":' + (
            repr(ttft_ms).removesuffix(".0") if 1e-4 <= ttft_ms < 1e16
            else _jcs_number(ttft_ms)),
        "}"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        content = {name: value for name, value in locals().items()
                   if name in _CANONICAL_FIELDS and value is not None}
        return rfc8785.dumps(content)


_CANONICAL_FIELDS = frozenset(_canonical.__code__.co_varnames[:_canonical.__code__.co_argcount])


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


# Every key an item's schema defines: an item holding only these is not lower-cased key by key
# in the body-field check (its nested values are still walked).
_PLAIN_KEYS = plain_keys([*ObservationIn.model_fields, *TimingModelIn.model_fields])


# `ObservationIn.model_validate` without its Python wrapper (argument handling, per item).
_validate_observation: Callable[[Any], ObservationIn] = \
    ObservationIn.__pydantic_validator__.validate_python


def _refusals(index: int, item: Mapping[str, Any], exc: ValidationError) -> list[ItemError]:
    """Why the schema refused an item: each body-like key it holds, else the schema's first
    error."""
    refused = body_keys(item, _PLAIN_KEYS)
    if refused:
        return [ItemError(index, name, "body_field_refused", BODY_FIELD_SENTENCE)
                for name in refused]
    first = exc.errors(include_input=False, include_url=False, include_context=False)[0]
    return [_pydantic_error(index, first)]


def build(batch: _Batch, index: int, item: Any) -> StoredObservation | list[ItemError]:
    """Validate one item and build its stored form, or say why not (never echoing a value)."""
    if type(item) is not dict and not isinstance(item, Mapping):
        return [ItemError(index, None, "invalid_type", "Each observation must be an object.")]
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


def parse_time(value: str, field_name: str) -> datetime:
    """An RFC 3339 timestamp with a timezone (query parameters such as `before`)."""
    try:
        moment = _TIME.validate_python(value)
    except ValidationError:
        raise InvalidInput("Must be an RFC 3339 timestamp with a timezone (use Z for UTC).",
                           field=field_name) from None
    return check_time(moment, field_name)


_ENVELOPE = frozenset({"items"})


def batch_items(document: Any) -> list[Any]:
    """The items of a batch request `{"items": [...]}`; whole-request problems raise."""
    sentence = "The body must be an object with a list of observations in items."
    closed_envelope(document, _ENVELOPE, sentence)
    if not isinstance(document.get("items"), list):
        raise InvalidInput(sentence, field="items")
    items: list[Any] = document["items"]
    if len(items) > MAX_BATCH:
        raise PayloadTooLarge(f"A batch holds at most {MAX_BATCH} observations.", field="items")
    return items


def _same(o: StoredObservation) -> tuple[str, str, str, str | None]:
    return o.tenant, o.deployment, o.sort_key, o.fingerprint


def _dedupe(observations: Iterable[StoredObservation]) -> list[StoredObservation]:
    # Re-sending the same observation inside one batch is accepted and changes nothing; DynamoDB
    # would refuse a BatchWriteItem holding one key twice. The same id with other content is not
    # the same observation: it stays, and the store refuses it as a conflict.
    seen: dict[tuple[str, str, str, str | None], StoredObservation] = {}
    for o in observations:
        seen.setdefault(_same(o), o)
    return list(seen.values())


class CaptureService:
    def __init__(self, store: ObservationStore, keyrings: KeyringStore,
                 clock: Callable[[], datetime] = utcnow):
        self._store = store
        self._keyrings = keyrings
        self._clock = clock

    def keyring(self, tenant: str) -> Keyring:
        return self._keyrings.get(tenant)

    def identity_keys(self, tenant: str) -> KeySet:
        return self._keyrings.get(tenant).identity

    def prepare(self, tenant: str, items: Sequence[Any], *, identities: IdentityMode = "raw",
                ) -> tuple[list[StoredObservation], IngestResult]:
        """Validate every item; (observations to store, result without write stats)."""
        indexed, result = self._prepare(tenant, items, identities)
        return [o for _, o in indexed], result

    def _prepare(self, tenant: str, items: Sequence[Any], identities: IdentityMode,
                 ) -> tuple[list[tuple[int, StoredObservation]], IngestResult]:
        now = self._clock()
        cached: list[KeySet] = []

        def keys() -> KeySet:
            if not cached:
                cached.append(self.identity_keys(tenant))
            return cached[0]

        batch = _Batch(tenant, _Identities(identities, keys), now)
        good: list[tuple[int, StoredObservation]] = []
        result = IngestResult()
        for index, item in enumerate(items):
            built = build(batch, index, item)
            if isinstance(built, StoredObservation):
                good.append((index, built))
            else:
                result.rejected += 1
                result.errors.extend(built)
        result.accepted = len(good)
        return good, result

    def ingest(self, tenant: str, items: Sequence[Any], *,
               identities: IdentityMode = "raw") -> IngestResult:
        """The ingest function: validate each item, pseudonymize, store the valid ones.

        All-or-item: an item the store refuses for a reason of its own (an id naming other
        content, an item it cannot hold) is rejected by index like an invalid one, and the rest
        are stored; only a transient failure raises (`DependencyUnavailable`, HTTP 503), and a
        re-send then converges to every valid item stored once."""
        indexed, result = self._prepare(tenant, items, identities)
        if not indexed:
            return result
        unique = _dedupe(o for _, o in indexed)
        result.stats = self._store.put_many(unique)
        refused = {_same(unique[i]): code for i, code in result.stats.refused.items()}
        for index, o in indexed:
            code = refused.get(_same(o))
            if code is not None:
                field_name, message = STORE_REFUSALS[code]
                result.accepted -= 1
                result.rejected += 1
                result.errors.append(ItemError(index, field_name, code, message))
        result.errors.sort(key=lambda e: e.index)
        return result

    def ingest_otlp(self, tenant: str, document: Any,
                    options: OtlpOptions | None = None) -> OtlpResult:
        """OTLP spans through the same ingest: errors name the span and its OTLP field."""
        mapping = map_document(document, options)
        result = self.ingest(tenant, mapping.items)
        errors = [ItemError(mapping.span_index[e.index], OTLP_FIELD.get(e.field or "", e.field),
                            e.code, e.message) for e in result.errors]
        return OtlpResult(result.accepted, result.rejected, errors, result.stats,
                          spans=mapping.spans, ignored_spans=mapping.ignored_spans,
                          dropped_attributes=mapping.dropped_attributes,
                          dropped_content_attributes=mapping.dropped_content_attributes)

    def store(self, observations: Sequence[StoredObservation]) -> WriteStats:
        return self._store.put_many(_dedupe(observations)) if observations else WriteStats(0, 0, 0)

    def delete(self, tenant: str, deployment: str, before: datetime | None = None) -> int:
        return self._store.delete(tenant, *self._deletion(deployment, before))

    def delete_page(self, tenant: str, deployment: str,
                    before: datetime | None = None) -> tuple[int, bool]:
        """One call's bounded part of `delete`: (rows deleted, whether finished)."""
        return self._store.delete_page(tenant, *self._deletion(deployment, before))

    @staticmethod
    def _deletion(deployment: str, before: datetime | None) -> tuple[str, int | None]:
        if not isinstance(deployment, str) or NAME_RE.match(deployment) is None:
            raise InvalidInput("Deployment names are 1-128 letters, digits, '.', '_' or '-'.",
                               field="deployment")
        return deployment, None if before is None else _epoch_ms(before)

    def queue_intake(self) -> QueueIntake:
        return QueueIntake(self)


# -- the queue path -------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    body: str
    attributes: Mapping[str, str]  # String message attributes


def _raw_identity(item: Mapping[str, Any]) -> bool:
    """Whether an identity field holds anything but a pseudonym (a raw id, or something else)."""
    values = [item.get(f) for f in IDENTITY_FIELDS]
    blocks = item.get("prefix_block_ids")
    values += blocks if isinstance(blocks, list) else [blocks]
    return any(v is not None and not (isinstance(v, str) and PSEUDONYM_RE.match(v)) for v in values)


class QueueIntake:
    """One SQS batch: verify and validate each message, then store all of them in one write.

    `accept` consumes a message for good (returns a verdict) unless a dependency fails, in
    which case it raises `DependencyUnavailable` and the message is retried. `commit` writes what
    was buffered and returns the message ids to retry if that write failed. Messages that are
    unsigned, badly signed, carry a body or are malformed are consumed and counted: retrying them
    could only move them (and whatever they carry) into the DLQ.
    """

    def __init__(self, service: CaptureService):
        self._service = service
        self._pending: list[tuple[str, list[StoredObservation]]] = []
        self.verdicts: Counter[str] = Counter()
        self.items: Counter[str] = Counter()

    def _drop(self, reason: str) -> str:
        self.verdicts[reason] += 1
        return reason

    def accept(self, message: QueueMessage) -> str:
        """The verdict on one message. Only `DependencyUnavailable` escapes (the message is then
        retried); any other failure means the message cannot be read, verified or validated, so
        it is consumed and counted as `unreadable`, logged by message id and error class only
        (an exception's text may quote the body)."""
        try:
            return self._accept(message)
        except DependencyUnavailable:
            raise
        except Exception as exc:  # the one place where any failure is a verdict
            log.warning("capture message %s consumed unread: %s", message.message_id,
                        type(exc).__name__)
            return self._drop("unreadable")

    def _accept(self, message: QueueMessage) -> str:
        attrs = message.attributes
        tenant, version, signature = (attrs.get(signing.ATTR_TENANT),
                                      attrs.get(signing.ATTR_KEY_VERSION),
                                      attrs.get(signing.ATTR_SIGNATURE))
        if not tenant or not version or not signature:
            return self._drop("unsigned")
        # Content checks come before anything that can fail transiently (the keyring read): a
        # message that may be retried, and so may end in the DLQ, never holds a body or a raw id.
        try:
            document = json.loads(message.body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested ~1000+ deep
            return self._drop("malformed")
        items = document.get("items") if isinstance(document, dict) and "items" in document \
            else [document]
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH:
            return self._drop("malformed")
        if any(isinstance(i, Mapping) and body_fields(i) for i in items):
            self.items["rejected"] += len(items)
            return self._drop("body_field")
        if any(isinstance(i, Mapping) and _raw_identity(i) for i in items):
            self.items["rejected"] += len(items)
            return self._drop("raw_identity")
        if not TENANT_RE.match(tenant):
            return self._drop("unknown_tenant")
        try:
            keyring = self._service.keyring(tenant)
        except NotFound:
            return self._drop("unknown_tenant")
        if not signing.verify(message.body, signature, keyring.ingest, version):
            return self._drop("bad_signature")
        good, result = self._service.prepare(tenant, items, identities="pseudonymized")
        self.items["accepted"] += result.accepted
        self.items["rejected"] += result.rejected
        for err in result.errors:
            self.items[f"rejected_{err.code}"] += 1
        if good:
            self._pending.append((message.message_id, good))
        self.verdicts["accepted"] += 1
        return "accepted"

    def commit(self) -> tuple[list[str], WriteStats]:
        """Store every buffered observation; (message ids to retry, write stats)."""
        observations = [o for _, batch in self._pending for o in batch]
        if not observations:
            return [], WriteStats(0, 0, 0)
        try:
            stats = self._service.store(observations)
        except DependencyUnavailable:
            log.warning("observation store unavailable; %d messages will be retried",
                        len(self._pending))
            return [mid for mid, _ in self._pending], WriteStats(0, 0, 0)
        # Refused for a reason of their own: counted like invalid items, never retried.
        for code in stats.refused.values():
            self.items["accepted"] -= 1
            self.items["rejected"] += 1
            self.items[f"rejected_{code}"] += 1
        return [], stats
