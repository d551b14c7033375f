"""Queue message signatures: HMAC-SHA256 over the exact message body with the tenant's ingest key.

Gateways sign at the edge (`infercrane.edge`); the capture function verifies before it reads a
single field of the body. The tenant named in the message attributes only selects which key to
verify with: a message signed with another tenant's key does not verify.
"""

from __future__ import annotations

import hashlib
import hmac

from infercrane.domain.tenancy import KeySet

# SQS message attribute names (String attributes). DLQ inspection hides `signature`.
ATTR_TENANT = "tenant"
ATTR_KEY_VERSION = "key_version"
ATTR_SIGNATURE = "signature"


def sign(body: str, keys: KeySet, version: str | None = None) -> tuple[str, str]:
    """(key version, hex signature) of `body` with the current (or given) ingest key."""
    version = version or keys.current
    return version, hmac.new(keys.key(version), body.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(body: str, signature: str, keys: KeySet, version: str) -> bool:
    """Constant-time check; an unknown version, a body that is not valid Unicode or a signature
    that is not ASCII are simply failed verifications (never an exception: a check that raised
    would have the message retried, unverified, into the DLQ)."""
    if version not in keys.keys:
        return False
    try:
        mac = hmac.new(keys.keys[version], body.encode("utf-8"), hashlib.sha256)
    except UnicodeEncodeError:  # a lone surrogate cannot have been signed
        return False
    # Bytes on both sides: compare_digest refuses str holding non-ASCII characters.
    return hmac.compare_digest(mac.hexdigest().encode(), signature.encode("utf-8", "replace"))
