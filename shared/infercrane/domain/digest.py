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
from collections.abc import Mapping
from typing import Any

import rfc8785

from infercrane.domain.validation import DIGEST_RE
from infercrane.errors import InvalidInput

# Not part of the evidence: they differ between two builds of the same observations.
VOLATILE_FIELDS = frozenset({"digest", "build"})
DIGEST_PATTERN = DIGEST_RE  # the rule is validation's; the name stays for callers


_INT_MAX = 2**53 - 1


class _Fallback(Exception):
    """A value whose canonical form the fast path does not guarantee: use the reference."""


class _Normalizer:
    """Rewrites a JSON value so the standard library prints it as RFC 8785 does.

    Integral floats become ints. Floats the standard library would print with an exponent
    (|x| < 1e-4) are replaced by a placeholder string carrying a per-call random token and swapped
    for the reference's own digits after encoding; no submitted string can guess the token.
    """

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        self.floats: list[bytes] = []

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
            return [self(v) for v in value]
        raise _Fallback

    def _float(self, value: float) -> Any:
        magnitude = abs(value)
        if value == 0:
            return 0  # JCS writes -0.0 and 0.0 as 0
        if value.is_integer():
            if magnitude <= _INT_MAX:
                return int(value)
            raise _Fallback  # repr writes an exponent or a trailing .0 here
        # repr is positional here, exactly as ECMAScript's Number::toString (shortest digits).
        if 1e-4 <= magnitude < 1e16:
            return value
        if magnitude < 1e-4 and math.isfinite(value):
            self.floats.append(rfc8785.dumps(value))
            return f"\x00{self.token}:{len(self.floats) - 1}"
        raise _Fallback

    def restore(self, encoded: bytes) -> bytes:
        if not self.floats:
            return encoded
        pattern = re.compile(rb'"\\u0000' + self.token.encode() + rb':([0-9]+)"')
        return pattern.sub(lambda m: self.floats[int(m.group(1))], encoded)


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


def digest_content(document: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in VOLATILE_FIELDS}


def compute_digest(document: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(digest_content(document))).hexdigest()


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
