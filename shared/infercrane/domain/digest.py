"""The canonical digest of a trace document.

`sha256:` + hex SHA-256 of the RFC 8785 (JSON Canonicalization Scheme) form of the document without
its `digest` and without volatile fields (`build`: when, by which request and software it was
built). Any re-serialization of the same JSON values (key order, whitespace, `1.0` vs `1`, escapes)
canonicalizes to the same bytes, so it verifies; any changed value does not.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Iterable, Mapping
from itertools import chain, compress, islice, repeat
from json.encoder import encode_basestring
from operator import itemgetter
from typing import Any

import rfc8785

from infercrane.domain.validation import DIGEST_RE
from infercrane.errors import InvalidInput

# Not part of the evidence: they differ between two builds of the same observations.
VOLATILE_FIELDS = frozenset({"digest", "build"})
DIGEST_PATTERN = DIGEST_RE  # the rule is validation's; the name stays for callers


_INT_MAX = 2**53 - 1
# A list of at least this many dicts is first tried as a table (`_table`); shorter ones are
# walked value by value, which costs as little there.
_TABLE_MIN = 8
_CHUNK_ROWS = 1_000  # rows of a table joined at a time
_NONE = type(None)
# Equal values of one of these types have one canonical text (0.0 and -0.0 both write `0`), so a
# column holding a single such value is encoded once.
_CONSTANT_TYPES = frozenset({str, int, float, bool, _NONE})
# The C function `json.dumps(ensure_ascii=False)` writes strings with: it escapes exactly what
# RFC 8785 escapes (`"`, `\\`, U+0000..U+001F, with the same short forms and lowercase hex).
_encode_str = encode_basestring


class _Fallback(Exception):
    """A value whose canonical form the fast path does not guarantee: use the reference."""


def _positional(value: float) -> int | float:
    """`value` as the standard library prints it the RFC 8785 way (an integral float as an int,
    shortest digits in the positional range); _Fallback where it would not."""
    if value.is_integer():
        if -_INT_MAX <= value <= _INT_MAX:
            return int(value)  # JCS writes -0.0 and 0.0 as 0
        raise _Fallback  # repr writes an exponent or a trailing .0 here
    # repr is positional here, exactly as ECMAScript's Number::toString (shortest digits).
    if 1e-4 <= abs(value) < 1e16:
        return value
    raise _Fallback  # an exponent (or not finite): the caller decides


def _text(value: Any) -> str:
    """The canonical text of one table cell: a scalar or a list of strings; else _Fallback."""
    kind = type(value)
    if kind is str:
        return _encode_str(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        if -_INT_MAX <= value <= _INT_MAX:
            return str(value)
        raise _Fallback
    if kind is float:
        return str(_positional(value))
    if (kind is list or kind is tuple) and set(map(type, value)) <= {str}:
        return "[" + ",".join(map(_encode_str, value)) + "]"
    raise _Fallback


def _cells(values: list[Any], kind: type) -> list[str]:
    """The texts of cells that all hold values of exactly type `kind` (C-level loops)."""
    if kind is str:
        return list(map(_encode_str, values))
    if kind is int:
        if min(values) < -_INT_MAX or max(values) > _INT_MAX:
            raise _Fallback
        return list(map(int.__repr__, values))
    if kind is float:
        integral = list(map(float.is_integer, values))
        if all(integral):  # so all finite: -0.0 becomes 0, as JCS writes it
            if max(map(abs, values)) > _INT_MAX:
                raise _Fallback
            return list(map(int.__repr__, map(int, values)))
        if not all(map(math.isfinite, values)):
            raise _Fallback
        # Finite, so min and max are exact; an integral value's text needs |x| <= 2**53 - 1,
        # a fractional one's 1e-4 <= |x| (below 1e16 it is: every float from 2**52 is integral).
        if max(map(abs, values)) > _INT_MAX or (
                min(map(abs, values)) < 1e-4 and any(0 < abs(v) < 1e-4 for v in values)):
            raise _Fallback
        texts = list(map(float.__repr__, values))  # positional, shortest digits: JCS's
        for i in compress(range(len(values)), integral):  # `1.0` is written `1`
            texts[i] = str(int(values[i]))
        return texts
    return list(map(_text, values))


def _column(values: list[Any]) -> str | list[str]:
    """A column's cell texts, or its one text when every cell holds the same value."""
    if values[0] is None and values.count(None) == len(values):
        return "null"  # a field no record holds (most optional ones): one pass, no type set
    types = set(map(type, values))
    if len(types) == 1:
        kind = types.pop()
        if (kind in _CONSTANT_TYPES and values[0] == values[-1]
                and values.count(values[0]) == len(values)):
            return _text(values[0])
        return _cells(values, kind)
    if len(types) == 2 and _NONE in types:  # a nullable field: its values, then the nulls
        kind = (types - {_NONE}).pop()
        texts = iter(_cells([v for v in values if v is not None], kind))
        return ["null" if v is None else next(texts) for v in values]
    return list(map(_text, values))


def _table(rows: list[Any]) -> bytes:
    """The canonical bytes of a list of flat dicts sharing one key set (trace records): its
    columns through `_columns`; _Fallback for anything else, and the caller walks the list
    value by value as before."""
    first = rows[0]
    if set(map(type, rows)) != {dict} or set(map(len, rows)) != {len(first)}:
        raise _Fallback
    # Rows as long as the first that all hold its keys hold exactly its keys (KeyError else).
    return b"".join(_columns({key: list(map(itemgetter(key), rows)) for key in first}, len(rows)))


def _columns(columns: Mapping[Any, list[Any]], count: int) -> list[bytes]:
    """The canonical bytes of the `count` rows `{key: columns[key][i] for key in columns}`, built
    column by column with C-level loops instead of walking every value: each column's types are
    checked exactly (`type(v) is ...`, never isinstance) and anything else (nesting, a float the
    standard library prints with an exponent, an int past 2**53 - 1, a non-ASCII key) is
    _Fallback."""
    if not count:
        return [b"[]"]
    if not columns or not all(type(k) is str and k.isascii() for k in columns):
        raise _Fallback
    # Each row is its cells' texts between fixed pieces (names, constant cells, punctuation):
    # one join over all of them writes the whole text once.
    pieces: list[Iterable[str]] = []
    fixed = ""
    for index, key in enumerate(sorted(columns)):  # ASCII: code point order is UTF-16 order
        values = columns[key]
        if len(values) != count:
            raise _Fallback
        texts = _column(values)
        fixed += ("," if index else "{") + _encode_str(key) + ":"
        if isinstance(texts, str):
            fixed += texts
        else:
            pieces += [repeat(fixed, count), texts]
            fixed = ""
    pieces.append(repeat(fixed + "}", count))
    # The first row opens the array, every later one follows a comma.
    first_fixed = next(iter(pieces[0]))
    pieces[0] = chain(["[" + first_fixed], repeat("," + first_fixed, count - 1))
    # Joined in chunks of rows: a text of tens of MB and its bytes would each be fresh memory
    # from the system (page faults cost half the join); chunks reuse the allocator's.
    rows = zip(*pieces, strict=True)
    chunks = []
    while text := "".join(chain.from_iterable(islice(rows, _CHUNK_ROWS))):
        chunks.append(text.encode("utf-8"))
    chunks.append(b"]")
    return chunks


def table_bytes(columns: Mapping[str, list[Any]], count: int) -> list[bytes] | None:
    """The canonical bytes, in chunks, of the list of `count` dicts whose `key` holds
    `columns[key][i]`, for a caller that holds its rows' columns already (a trace build); None
    when not guaranteed identical to the reference: then `canonical_bytes` of the rows."""
    try:
        return _columns(columns, count)
    except (_Fallback, UnicodeEncodeError):
        return None


class _Normalizer:
    """Rewrites a JSON value so the standard library prints it as RFC 8785 does.

    Integral floats become ints. A long list of flat dicts is encoded as a table (`_table`), and
    a float the standard library would print with an exponent (|x| < 1e-4) by the reference; each
    is replaced by a placeholder string carrying a per-call random token and swapped for its
    bytes after encoding; no submitted string can guess the token.
    """

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        self.spliced: list[bytes] = []

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is bool or value is None:
            return value
        if kind is int:
            if -_INT_MAX <= value <= _INT_MAX:
                return value
            raise _Fallback
        if kind is float:
            return self._float(value)
        if kind is dict:
            # ASCII keys sort the same by code point (json) and by UTF-16 unit (JCS).
            if not all(type(k) is str and k.isascii() for k in value):
                raise _Fallback
            return {k: self(v) for k, v in value.items()}
        if kind is list or kind is tuple:
            if len(value) >= _TABLE_MIN and type(value[0]) is dict:
                try:
                    return self._splice(_table(value))
                except (_Fallback, KeyError, UnicodeEncodeError):
                    pass  # not a table this encoder vouches for: value by value
            return [self(v) for v in value]
        raise _Fallback

    def _splice(self, encoded: bytes) -> str:
        self.spliced.append(encoded)
        return f"\x00{self.token}:{len(self.spliced) - 1}"

    def _placeholder(self, index: int) -> bytes:
        """How json.dumps writes the placeholder of spliced value `index`."""
        return b'"\\u0000' + self.token.encode() + b":" + str(index).encode() + b'"'

    def _float(self, value: float) -> Any:
        try:
            return _positional(value)
        except _Fallback:
            if abs(value) < 1e-4 and math.isfinite(value):
                return self._splice(rfc8785.dumps(value))
            raise

    def restore(self, encoded: bytes) -> bytes:
        if not self.spliced:
            return encoded
        if encoded == self._placeholder(0) and len(self.spliced) == 1:
            return self.spliced[0]  # the value was one table: no copy of its bytes
        pattern = re.compile(rb'"\\u0000' + self.token.encode() + rb':([0-9]+)"')
        return pattern.sub(lambda m: self.spliced[int(m.group(1))], encoded)


def fast_canonical_bytes(document: Any) -> bytes | None:
    """RFC 8785 bytes through the C-accelerated `json` module, or None when not guaranteed
    identical to the reference (`rfc8785`); tests check byte identity on every trace shape."""
    normalizer = _Normalizer()
    try:
        text = json.dumps(normalizer(document), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
        return normalizer.restore(text.encode("utf-8"))
    except (_Fallback, ValueError, UnicodeEncodeError, RecursionError,
            rfc8785.CanonicalizationError):
        return None


def canonical_bytes(document: Any) -> bytes:
    fast = fast_canonical_bytes(document)
    if fast is not None:
        return fast
    try:
        return rfc8785.dumps(document)
    except rfc8785.CanonicalizationError as exc:
        raise InvalidInput("The document holds a value JSON cannot represent canonically.",
                           field="document") from exc


def canonical_around(document: Mapping[str, Any], key: str) -> tuple[bytes, bytes]:
    """The canonical bytes of `document` before and after the value of its top-level `key`:
    RFC 8785 writes a member's value as that value's own canonical bytes, so head + the value's
    canonical bytes + tail is `canonical_bytes(document)`. The one way a build splices in the
    records it encoded (or spooled) once instead of encoding them again."""
    hole = "\x00" + secrets.token_hex(16)  # a string no document holds: a random token
    head, found, tail = canonical_bytes({**document, key: hole}).partition(canonical_bytes(hole))
    if not found:  # pragma: no cover - the hole is a value of the document
        raise RuntimeError("placeholder not found in the canonical document")
    return head, tail


def digest_content(document: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in VOLATILE_FIELDS}


def compute_digest(document: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(digest_content(document))).hexdigest()


def spliced_digest(document: Mapping[str, Any], key: str, encoded: Iterable[bytes]) -> str:
    """`compute_digest(document)` given `encoded`, the canonical bytes of its `key`'s value in
    chunks (`canonical_around`): that value is not encoded again."""
    head, tail = canonical_around(digest_content(document), key)
    digest = hashlib.sha256(head)
    for chunk in encoded:
        digest.update(chunk)
    digest.update(tail)
    return "sha256:" + digest.hexdigest()


def verify_digest(document: Mapping[str, Any]) -> tuple[bool, str]:
    """(matches, recomputed digest)."""
    recomputed = compute_digest(document)
    return document.get("digest") == recomputed, recomputed


def normalize_digest(text: str, *, field: str = "digest") -> str:
    """`sha256:<hex>` or bare hex (either case) -> `sha256:<lowercase hex>`; else an error."""
    value = text.strip().lower()
    if not value.startswith("sha256:"):
        value = "sha256:" + value
    if not DIGEST_PATTERN.match(value):
        raise InvalidInput("A trace digest is sha256: followed by 64 hex digits.", field=field)
    return value


MIN_PREFIX_HEX = 6
DIGEST_PREFIX_PATTERN = re.compile(rf"^sha256:[0-9a-f]{{{MIN_PREFIX_HEX},64}}$")


def normalize_digest_prefix(text: str, *, field: str = "digest") -> str:
    """A full digest or a unique-looking prefix of one (at least 6 hex digits, `sha256:` optional)
    -> `sha256:<lowercase hex>`; else an error."""
    value = text.strip().lower()
    if not value.startswith("sha256:"):
        value = "sha256:" + value
    if not DIGEST_PREFIX_PATTERN.match(value):
        raise InvalidInput(f"A trace digest is sha256: followed by 64 hex digits (or at least "
                           f"its first {MIN_PREFIX_HEX}).", field=field)
    return value
