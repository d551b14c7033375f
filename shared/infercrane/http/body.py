"""Reading a request body: the one place that bounds its size, encoding and depth.

Transport, not domain: only the HTTP edge reads a body (the CLI's importers read files of their
own formats). Every JSON body passes here before anything parses it (`http/app.py` for every
route, the OTLP route again after gzip decompression): a body over API Gateway's 10 MB, not UTF-8,
nested deeper than `MAX_DEPTH` or not JSON is refused with a 4xx whose message names none of its
content. The depth is measured on the text, before `json.loads`, so a body nested 10,000 deep never
reaches a recursive parser.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

from infercrane.errors import BadRequest, MalformedRequest, PayloadTooLarge

MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's own limit
MAX_DEPTH = 32

# A JSON string literal (possessive, so a long string costs one linear pass) or a bracket.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]++")


# A body without a Content-Type is read as JSON (as Powertools reads it); any other type is not.
JSON_MEDIA_TYPES = frozenset({"application/json", ""})
# OTLP/HTTP's protobuf type, the one its answers carry; requests may also use the other spelling.
PROTOBUF_MEDIA_TYPE = "application/x-protobuf"
PROTOBUF_MEDIA_TYPES = frozenset({PROTOBUF_MEDIA_TYPE, "application/protobuf"})


class UnsupportedMediaType(BadRequest):
    """A body of a media type the route does not read: HTTP 415 (`http/errors.py`)."""

    code = "unsupported_media_type"


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether brackets outside string literals nest deeper than `limit`."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    depth = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def read_json(raw: bytes) -> Any:
    """The parsed body, or a `PayloadTooLarge` / `MalformedRequest` naming none of its content."""
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge("The request body exceeds 10 MB.", field="body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest("The request body is not valid UTF-8.",
                            code="invalid_encoding") from None
    if too_deep(raw):
        raise MalformedRequest(f"The request body nests deeper than {MAX_DEPTH} levels.",
                            code="too_deep")
    try:
        document = json.loads(text, object_pairs_hook=_object, parse_constant=_non_finite,
                              parse_float=_finite_float)
    except _Refused as exc:
        raise MalformedRequest(exc.sentence, code=exc.code) from None
    except (ValueError, RecursionError):
        raise MalformedRequest("The request body is not valid JSON.") from None
    if _SURROGATE_ESCAPE.search(raw) is not None and not _encodable(document):
        raise MalformedRequest("The request body holds an unpaired UTF-16 surrogate escape.",
                            code="invalid_encoding")
    return document


class _Refused(ValueError):
    def __init__(self, code: str, sentence: str):
        super().__init__(sentence)
        self.code = code
        self.sentence = sentence


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # I-JSON (RFC 7493): names are unique. Otherwise the last one silently wins, and a check that
    # read the first (or a log, a signature) saw other content than what is stored.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Refused("duplicate_key", "The request body repeats a key within one object.")
    return obj


def _non_finite(_: str) -> Any:
    # NaN, Infinity and -Infinity are not JSON (RFC 8259); Python's parser accepts them.
    raise _Refused("non_finite_number", "The request body holds a number that is not finite.")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in _INFINITIES:  # 1e400: valid JSON syntax, but no double holds it
        raise _Refused("non_finite_number", "The request body holds a number that is not finite.")
    return value


_INFINITIES = (float("inf"), float("-inf"))

# A `\uD800`-`\uDFFF` escape. Only a body holding one can decode to an unpaired surrogate, which
# no store can encode (DynamoDB refuses it, and UTF-8 has no form for it): the rare slow path.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _encodable(document: Any) -> bool:
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def inflate_gzip(raw: bytes) -> bytes:
    """A gzip body, inflated. Bounded, so a small bomb cannot exhaust memory."""
    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(raw, MAX_BODY_BYTES + 1)
    except zlib.error:
        raise MalformedRequest("The gzip request body could not be decompressed.",
                            code="invalid_encoding") from None
    if len(out) > MAX_BODY_BYTES or inflater.unconsumed_tail:
        raise PayloadTooLarge("The decompressed request body exceeds 10 MB.", field="body")
    return out
