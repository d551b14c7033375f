"""Pseudonymous identities: HMAC-SHA256 with a tenant's versioned identity key.

A pseudonym is `<key version>:<64 hex>` (e.g. `v1:3f2a...`). Within one tenant and key version the
same raw id always gives the same pseudonym, so sessions and shared prefixes stay linkable for
replay; across tenants (different secrets) the values are unrelated. Carrying the version lets
keys rotate: new data uses the current version, and a raw id can still be checked against an old
pseudonym with the version it names.
"""

from __future__ import annotations

import hmac
import re

from infercrane.domain.tenancy import KeySet

PSEUDONYM_RE = re.compile(r"^(v[1-9][0-9]{0,5}):([0-9a-f]{64})$")


def pseudonymize(raw: str, keys: KeySet, version: str | None = None) -> str:
    """The pseudonym of `raw` under `version` (default: the current key)."""
    version = version or keys.current
    # hmac.digest is the one-shot C path: the same bytes as hmac.new(...).digest(), cheaper.
    digest = hmac.digest(keys.key(version), raw.encode("utf-8"), "sha256").hex()
    return f"{version}:{digest}"


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


def fingerprint(content: bytes, key: bytes) -> str:
    """64 hex: HMAC-SHA256 of canonical content under the tenant's fingerprint key."""
    return hmac.digest(key, content, "sha256").hex()
