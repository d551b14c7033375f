"""The batch-ingest contract every batch path shares (observations, lifecycle attempts).

A batch is `{"items": [...]}` and nothing else: another top-level key would be dropped unread, so
it is refused (422 `unknown_field`, or `body_field_refused` for a body-like one) rather than
silently accepted; more than `MAX_BATCH` items is 413 `payload_too_large`. Each item is then
judged on its own: accepted, or rejected with an `ItemError` (index, field, code, fixed sentence)
whose code is one of `ITEM_CODES`, the same for every path because it comes from one mapping of
pydantic's error types (`item_error`). No error here ever quotes a submitted value or key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infercrane.domain.validation import (
    BODY_FIELD_SENTENCE,
    PlainKeys,
    body_keys,
    error_location,
    fixed_sentence,
    refuse_body_keys,
)
from infercrane.errors import InvalidInput, PayloadTooLarge

MAX_BATCH = 500
ENVELOPE = frozenset({"items"})

# The codes an item is rejected with. Paths add their own for rules outside the schema (capture's
# identity checks and store refusals), never another name for one of these.
MISSING = "missing"
UNKNOWN_FIELD = "unknown_field"
OUT_OF_RANGE = "out_of_range"
INVALID_FORMAT = "invalid_format"
INVALID_TYPE = "invalid_type"
BODY_FIELD_REFUSED = "body_field_refused"
ITEM_CODES = frozenset({MISSING, UNKNOWN_FIELD, OUT_OF_RANGE, INVALID_FORMAT, INVALID_TYPE,
                        BODY_FIELD_REFUSED})

_CODES = {"missing": MISSING, "extra_forbidden": UNKNOWN_FIELD}
_RANGE = frozenset({"greater_than_equal", "greater_than", "less_than_equal", "less_than",
                    "too_long", "too_short", "string_too_short", "string_too_long"})
# `value_error`: our own validators' (text no store can hold, `validation.StorableText`).
_FORMAT = frozenset({"string_pattern_mismatch", "literal_error", "timezone_aware", "value_error"})


@dataclass(frozen=True)
class ItemError:
    index: int
    field: str | None
    code: str
    message: str

    def to_document(self) -> dict[str, Any]:
        return {"index": self.index, "field": self.field, "code": self.code,
                "message": self.message}


@dataclass
class IngestResult:
    """What a batch came to: items accepted, items rejected and why (by index)."""

    accepted: int = 0
    rejected: int = 0
    errors: list[ItemError] = field(default_factory=list)

    def to_document(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rejected": self.rejected,
                "errors": [e.to_document() for e in self.errors]}


def batch_items(document: Any, what: str) -> list[Any]:
    """The items of a batch document `{"items": [...]}` (`what` they are, plural, for the
    sentences); whole-request problems raise (422, 413)."""
    sentence = f"The body must be an object with a list of {what} in items."
    closed_envelope(document, ENVELOPE, sentence)
    return checked_items(document.get("items"), what)


def checked_items(items: Any, what: str) -> list[Any]:
    """`items` if it is a list of at most `MAX_BATCH` entries, else 422 or 413."""
    if not isinstance(items, list):
        raise InvalidInput(f"The body must be an object with a list of {what} in items.",
                           field="items")
    if len(items) > MAX_BATCH:
        raise PayloadTooLarge(f"A batch holds at most {MAX_BATCH} {what}.", field="items")
    return items


def closed_envelope(document: Any, allowed: frozenset[str], sentence: str) -> Mapping[str, Any]:
    """A request envelope holding only `allowed` keys, else 422. `sentence` says what the body
    must be; an unknown key is never named, a body-like one in our spelling."""
    if not isinstance(document, Mapping):
        raise InvalidInput(sentence, field=min(allowed))
    extra = [key for key in document if key not in allowed]
    if extra:
        refuse_body_keys(dict.fromkeys(extra))
        raise InvalidInput(f"Only {', '.join(sorted(allowed))} is allowed at the top level.",
                           code=UNKNOWN_FIELD)
    return document


def item_error(index: int, err: Mapping[str, Any]) -> ItemError:
    """One pydantic error (`ValidationError.errors(include_input=False)`) as an item error."""
    kind = str(err.get("type", ""))
    if kind in _CODES:
        code = _CODES[kind]
    elif kind in _RANGE:
        code = OUT_OF_RANGE
    elif kind in _FORMAT or kind.startswith("datetime"):
        code = INVALID_FORMAT
    else:
        code = INVALID_TYPE
    return ItemError(index, error_location(err), code, fixed_sentence(kind))


def schema_refusals(index: int, item: Mapping[str, Any], first: Mapping[str, Any],
                    plain: PlainKeys) -> list[ItemError]:
    """Why a schema refused an item: each body-like key it holds (before any other error, so a
    body is named as such), else the schema's `first` error. `plain`: the schema's field names."""
    refused = body_keys(item, plain)
    if refused:
        return [ItemError(index, name, BODY_FIELD_REFUSED, BODY_FIELD_SENTENCE) for name in refused]
    return [item_error(index, first)]


def not_an_object(index: int, what: str) -> ItemError:
    return ItemError(index, None, INVALID_TYPE, f"Each {what} must be an object.")
