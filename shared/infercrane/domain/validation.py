"""Rules every input shares: fixed error sentences, tenant names, names, ids and digests,
body-like keys, time bounds.

pydantic's own messages may quote the submitted value (a prompt, a raw identity). Every place that
reports a validation error (the HTTP error module, per-item batch errors of capture and lifecycle
ingest) words it from this one table instead, so no error ever echoes input.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, NewType

from infercrane.clock import utcnow
from infercrane.errors import InvalidInput

FIXED_SENTENCES: dict[str, str] = {
    "missing": "This field is required.",
    "extra_forbidden": "This field is not allowed.",
    "string_type": "Must be a string.",
    "int_type": "Must be an integer.",
    "int_parsing": "Must be an integer.",
    "int_from_float": "Must be an integer.",
    "float_type": "Must be a number.",
    "float_parsing": "Must be a number.",
    "finite_number": "Must be a finite number.",
    "bool_type": "Must be a boolean.",
    "bool_parsing": "Must be a boolean.",
    "list_type": "Must be a list.",
    "dict_type": "Must be an object.",
    "model_type": "Must be an object.",
    "model_attributes_type": "Must be an object.",
    "greater_than_equal": "Is below the allowed minimum.",
    "greater_than": "Is below the allowed minimum.",
    "less_than_equal": "Is above the allowed maximum.",
    "less_than": "Is above the allowed maximum.",
    "string_too_short": "Is too short.",
    "string_too_long": "Is too long.",
    "too_short": "Has too few items.",
    "too_long": "Has too many items.",
    "string_pattern_mismatch": "Has an invalid format.",
    "literal_error": "Is not one of the allowed values.",
    "enum": "Is not one of the allowed values.",
    "datetime_parsing": "Must be an RFC 3339 timestamp.",
    "datetime_type": "Must be an RFC 3339 timestamp.",
    "datetime_from_date_parsing": "Must be an RFC 3339 timestamp.",
    "timezone_aware": "Must carry a timezone (use Z for UTC).",
    "url_parsing": "Must be a URL.",
    "url_scheme": "Must be an http or https URL.",
}


def error_location(err: Mapping[str, Any]) -> str | None:
    """Where a pydantic error is, as `items.3.input_tokens`, without any submitted key: for an
    unknown key the location ends in that key, so only its (known) parent is named."""
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
    if err.get("type") == "extra_forbidden":
        loc = loc[:-1]
    return ".".join(loc) or None


def fixed_sentence(error_type: str) -> str:
    """The sentence for one pydantic error type; never contains the submitted value."""
    return FIXED_SENTENCES.get(error_type, "Is invalid.")


# -- tenant names ---------------------------------------------------------------------------------

# 1-63 lowercase letters, digits or '-', starting with a letter (tenancy.validate_tenant_name words
# it for the caller). Here, not in tenancy, because every input naming a tenant is checked against
# it: the capacity domain (the aggregate function's cold start) need not load tenancy for it.
TENANT_RE = re.compile(r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$|^[a-z]$")

# -- names, ids and digests ----------------------------------------------------------------------

# Each rule once (tests/unit/test_one_home_per_rule.py finds a second definition): the pattern as
# text for pydantic's `Field(pattern=...)`, compiled (`*_RE`) for the checks written by hand.
# A deployment or revision name: 1-128 letters, digits, '.', '_' or '-', starting alphanumeric.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
NAME_RE = re.compile(NAME_PATTERN)


def deployment_name(value: object) -> str:
    """`value` if it is a deployment name, else `InvalidInput` naming the field `deployment`."""
    if not isinstance(value, str) or NAME_RE.match(value) is None:
        raise InvalidInput("Deployment names are 1-128 letters, digits, '.', '_' or '-'.",
                           field="deployment")
    return value

# A short name inside rollup keys (runtime, compute mode, region, zone, GPU type): 1-64 of the same
# characters; also safe inside keys (no '#' and no '|').
SHORT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SHORT_NAME_RE = re.compile(SHORT_NAME_PATTERN)
# A client-chosen id (observation id, attempt id): a name that may also hold ':'.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
# A SHA-256 as 64 lowercase hex digits, and as a digest: `sha256:` + those digits.
SHA256_HEX_PATTERN = r"^[0-9a-f]{64}$"
SHA256_HEX_RE = re.compile(SHA256_HEX_PATTERN)
# `DIGEST` unanchored, for the patterns that hold a digest (an import's provenance, a provider
# artifact's binding tag); `DIGEST_LENGTH` its length, for telling a full digest from a prefix.
DIGEST = r"sha256:[0-9a-f]{64}"
DIGEST_LENGTH = len("sha256:") + 64
DIGEST_PATTERN = rf"^{DIGEST}$"
DIGEST_RE = re.compile(DIGEST_PATTERN)

# -- body-like keys -------------------------------------------------------------------------------

# Key names that carry (or usually carry) prompt or output text. Matched case-insensitively, at any
# depth of a submitted document; any of them refuses the document, whatever the value.
BODY_FIELDS = frozenset({
    "prompt", "prompts", "messages", "message", "input", "inputs", "output", "outputs",
    "completion", "completions", "content", "contents", "text", "body", "request", "response",
    "request_body", "response_body", "choices", "system", "system_prompt", "instructions",
    "query", "question", "answer", "input_text", "output_text", "generated_text", "tool_calls",
    "tools", "functions", "documents", "context", "chat_history", "history", "transcript",
    "input_messages", "output_messages", "system_instructions", "raw", "payload",
})


# Key names a schema defines, none body-like: only `plain_keys` makes them.
PlainKeys = NewType("PlainKeys", frozenset[str])
_NO_PLAIN_KEYS = PlainKeys(frozenset())


def body_keys(document: Any, plain: PlainKeys = _NO_PLAIN_KEYS) -> list[str]:
    """The body-like key names found anywhere in `document`, in our own spelling (the submitted
    spelling is never returned, so an error can name the field without echoing input).

    Breadth first, so the shallowest key comes first; iterative, so depth costs no stack (JSON
    bodies are already bounded to `http/body.MAX_DEPTH`). `plain`: a caller's schema field names
    (`plain_keys`, which refuses a body-like one); an object whose keys all are is not
    lower-cased key by key (the cost of a valid item), its values are still walked.
    """
    if type(document) is dict and plain.issuperset(document) \
            and _SCALAR_TYPES.issuperset(map(type, document.values())):
        return []  # a flat object of schema keys (a valid item): nothing to walk, all in C
    found: list[str] = []
    queue = deque([document])
    while queue:
        node = queue.popleft()
        if isinstance(node, Mapping):
            if not plain.issuperset(node):
                for key in node:
                    name = key.strip().lower() if isinstance(key, str) else None
                    if name in BODY_FIELDS and name not in found:
                        found.append(name)
            for value in node.values():
                if not isinstance(value, _SCALARS):  # only containers can hold keys
                    queue.append(value)
        elif isinstance(node, list | tuple):
            queue.extend(v for v in node if not isinstance(v, _SCALARS))
    return found


BODY_FIELD_SENTENCE = "Prompt and output bodies are never accepted; remove this field."


def refuse_body_keys(document: Any) -> None:
    """422 `body_field_refused` for a document holding a body-like key at any depth, naming the
    shallowest one in our spelling (never the submitted one)."""
    refused = body_keys(document)
    if refused:
        raise InvalidInput(BODY_FIELD_SENTENCE, field=refused[0], code="body_field_refused")


def plain_keys(names: Iterable[str]) -> PlainKeys:
    """A schema's field names as `body_keys(..., plain=)`; refuses a body-like one, so a schema
    can never exempt a body field from the check."""
    plain = frozenset(names)
    if any(name.strip().lower() in BODY_FIELDS for name in plain):
        raise ValueError("A body-like key name cannot be a plain schema key.")
    return PlainKeys(plain)


_SCALARS = (str, int, float, type(None))  # bool is an int
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})  # exact types, as json.loads makes


# -- storable text ------------------------------------------------------------------------------

UNSTORABLE_SENTENCE = "Holds text that cannot be stored (an unpaired UTF-16 surrogate)."


def unstorable(text: str) -> bool:
    """Whether `text` holds what no store can encode: an unpaired surrogate (a JSON `\\ud800`
    escape, or a string a provider handed over) has no UTF-8 form; DynamoDB refuses it (and
    moto's server fails with a 500). Refused as input, never sent on to a store."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _storable(text: str) -> str:
    if unstorable(text):
        raise ValueError(UNSTORABLE_SENTENCE)
    return text


# A free-text string field of a request model that a store will hold: `StorableText`, built on
# first use (below), so the modules that import only a name, id or digest rule from here
# (digest, attestation, model identity: the CLI's verify and model commands) do not load pydantic.


# -- time bounds ----------------------------------------------------------------------------------

EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=UTC)
MAX_FUTURE = timedelta(days=1)
TIME_RANGE_SENTENCE = "Is outside the accepted time range (2000-01-01 to one day ahead)."


def within_bounds(moment: datetime, now: datetime, future: timedelta = MAX_FUTURE) -> bool:
    """Whether an aware time lies in [2000-01-01, now + future]. Times whose offset takes them
    past year 1 or 9999 (e.g. `0001-01-01T00:00:00+05:00`) are out of bounds, not an error."""
    try:
        utc = moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return False
    return EARLIEST_TIME <= utc <= now + future


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_us(moment: datetime) -> int:
    """An aware time as exact integer microseconds since 1970 UTC; any offset, even one that
    takes it past year 1 or 9999 (a difference of aware times never leaves timedelta's range)."""
    return (moment - _EPOCH) // _MICROSECOND


def bounds_us(now: datetime, future: timedelta = MAX_FUTURE) -> tuple[int, int]:
    """`within_bounds` as a range of `epoch_us`, for checking many times against one `now`:
    `within_bounds(m, now, future)` exactly when `lo <= epoch_us(m) <= hi`."""
    return epoch_us(EARLIEST_TIME), epoch_us(now + future)


def check_time(moment: datetime, field: str, now: datetime | None = None,
               future: timedelta = MAX_FUTURE) -> datetime:
    """The time in UTC, or `InvalidInput` (422) naming only the field."""
    if moment.tzinfo is None:
        raise InvalidInput(FIXED_SENTENCES["timezone_aware"], field=field)
    if not within_bounds(moment, now or utcnow(), future):
        raise InvalidInput(TIME_RANGE_SENTENCE, field=field)
    return moment.astimezone(UTC)


def _bounded(moment: datetime) -> datetime:
    if not within_bounds(moment, utcnow()):
        raise ValueError(TIME_RANGE_SENTENCE)
    return moment.astimezone(UTC)


# An RFC 3339 time with a timezone inside the default bounds, as UTC (request models):
# `BoundedTime`, built on first use as `StorableText` is.

if TYPE_CHECKING:
    from pydantic import AfterValidator, AwareDatetime

    StorableText = Annotated[str, AfterValidator(_storable)]
    BoundedTime = Annotated[AwareDatetime, AfterValidator(_bounded)]


def __getattr__(name: str) -> Any:
    """`StorableText` and `BoundedTime`, made (once) when a request model first names them."""
    if name not in ("StorableText", "BoundedTime"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pydantic import AfterValidator, AwareDatetime

    made = {"StorableText": Annotated[str, AfterValidator(_storable)],
            "BoundedTime": Annotated[AwareDatetime, AfterValidator(_bounded)]}
    globals().update(made)
    return made[name]
