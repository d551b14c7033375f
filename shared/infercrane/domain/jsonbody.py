"""Reading a JSON request body: the one place that bounds its size, encoding and depth.

Every JSON body passes here before anything parses it (`http/app.py` for every route, the OTLP
route again after gzip decompression): a body over 10 MB, not UTF-8, nested deeper than
`MAX_DEPTH` or not JSON is refused with a 4xx whose message names none of its content. The depth
is measured on the text, before `json.loads`, so a body nested 10,000 deep never reaches a
recursive parser.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

from infercrane.errors import BadRequest, PayloadTooLarge

MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's own limit
MAX_DEPTH = 32

# A JSON string literal (possessive, so a long string costs one linear pass) or a bracket.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]++")


# A body without a Content-Type is read as JSON (as Powertools reads it); any other type is not.
JSON_MEDIA_TYPES = frozenset({"application/json", ""})
PROTOBUF_MEDIA_TYPES = frozenset({"application/x-protobuf", "application/protobuf"})


class MalformedJson(BadRequest):
    """A body that cannot be read as JSON at all: HTTP 400."""

    code = "invalid_json"


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
    """The parsed body, or a `PayloadTooLarge` / `MalformedJson` naming none of its content."""
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge("The request body exceeds 10 MB.", field="body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedJson("The request body is not valid UTF-8.",
                            code="invalid_encoding") from None
    if too_deep(raw):
        raise MalformedJson(f"The request body nests deeper than {MAX_DEPTH} levels.",
                            code="too_deep")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise MalformedJson("The request body is not valid JSON.") from None


def inflate_gzip(raw: bytes) -> bytes:
    """A gzip body, inflated. Bounded, so a small bomb cannot exhaust memory."""
    try:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(raw, MAX_BODY_BYTES + 1)
    except zlib.error:
        raise MalformedJson("The gzip request body could not be decompressed.",
                            code="invalid_encoding") from None
    if len(out) > MAX_BODY_BYTES or inflater.unconsumed_tail:
        raise PayloadTooLarge("The decompressed request body exceeds 10 MB.", field="body")
    return out
