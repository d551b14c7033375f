"""Pseudonymous identities: HMAC-SHA256 with a tenant's versioned identity key.

A pseudonym is `<key version>:<64 hex>` (e.g. `v1:3f2a...`). Within one tenant and key version the
same raw id always gives the same pseudonym, so sessions and shared prefixes stay linkable for
replay; across tenants (different secrets) the values are unrelated. Carrying the version lets
keys rotate: new data uses the current version, and a raw id can still be checked against an old
pseudonym with the version it names.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable

from infercrane.domain.tenancy import KeySet

PSEUDONYM_RE = re.compile(r"^(v[1-9][0-9]{0,5}):([0-9a-f]{64})$")


# RFC 2104's pads, as translation tables of the key's bytes.
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))
_BLOCK = 64  # SHA-256's block size in bytes


class KeyedHmac:
    """HMAC-SHA256 under one key, for many short messages (a batch's identities): RFC 2104's
    inner and outer SHA-256 states absorb the padded key once, then each message costs two
    state copies and two short hashes. The same bytes as `hmac.digest(key, message, "sha256")`
    (tests/unit/test_capture_identity_hmac.py, oracle the stdlib), at about a third of its CPU
    here: OpenSSL 3 looks the algorithm up and keys a new context on every one-shot call."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        block = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(block.translate(_IPAD))
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def hexdigest(self, message: bytes) -> str:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


def pseudonymizer(keys: KeySet, version: str | None = None) -> Callable[[str], str]:
    """`pseudonymize` with the key and version looked up and keyed once (a batch makes
    thousands)."""
    version = version or keys.current
    prefix, hexdigest = version + ":", KeyedHmac(keys.key(version)).hexdigest

    def pseudonym(raw: str) -> str:
        return prefix + hexdigest(raw.encode("utf-8"))

    return pseudonym


def pseudonymize(raw: str, keys: KeySet, version: str | None = None) -> str:
    """The pseudonym of `raw` under `version` (default: the current key)."""
    return pseudonymizer(keys, version)(raw)


def is_pseudonym(value: object) -> bool:
    return isinstance(value, str) and PSEUDONYM_RE.match(value) is not None


def version_of(pseudonym: str) -> str:
    m = PSEUDONYM_RE.match(pseudonym)
    if m is None:
        raise ValueError("Not a pseudonym of the form <key version>:<64 hex>.")
    return m.group(1)


def matches(raw: str, pseudonym: str, keys: KeySet) -> bool:
    """Whether `pseudonym` was made from `raw` with this keyset (any version it still holds)."""
    version = version_of(pseudonym)
    if version not in keys.keys:
        return False
    return hmac.compare_digest(pseudonymize(raw, keys, version), pseudonym)


# The fingerprint key's label: a subkey derived for one purpose is unrelated to the pseudonyms
# made with the key it is derived from.
_FINGERPRINT_LABEL = b"infercrane/observation-fingerprint/v1"


def fingerprint_key(keys: KeySet) -> bytes:
    """The tenant's stable key for observation fingerprints (dedupe identities).

    Derived from the *first* identity key version, the one recorded when the tenant was created:
    rotation only adds versions (`KeySet.rotated`), so this key, unlike `keys.current`, never
    changes, and the identity of an observation survives every rotation. It is an HMAC subkey, so
    a fingerprint cannot be compared with a pseudonym, and it is as secret as the keyring."""
    first = min(keys.keys, key=lambda v: int(v.lstrip("v")))
    return hmac.digest(keys.keys[first], _FINGERPRINT_LABEL, "sha256")


def fingerprinter(keys: KeySet) -> Callable[[bytes], str]:
    """64 hex: HMAC-SHA256 of canonical content under the tenant's fingerprint key, keyed once
    for a batch."""
    return KeyedHmac(fingerprint_key(keys)).hexdigest
