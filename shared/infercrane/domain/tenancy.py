"""Tenants, API keys and the per-tenant HMAC keyring.

API keys are shown once and stored only as SHA-256 hashes. Each tenant has a keyring of HMAC
secrets: `identity` keys pseudonymize session / prefix identities, `ingest` keys sign queue
messages. Rotation adds a version; old versions stay for verification, never for new data.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime

from infercrane.domain.validation import TENANT_RE
from infercrane.errors import Conflict, InvalidInput, NotFound, Unauthorized
from infercrane.ports.directory import DirectoryStore
from infercrane.ports.secrets import KeyringStore
from infercrane.ports.usage_plans import UsagePlans

KEY_PREFIX = "ick"
_KEY_RE = re.compile(r"^ick_([0-9a-f]{12})_([A-Za-z0-9_-]{32,64})$")


def validate_tenant_name(name: str, *, field: str = "tenant") -> str:
    if not isinstance(name, str) or not TENANT_RE.match(name):
        raise InvalidInput(
            "Tenant names are 1-63 lowercase letters, digits or '-', starting with a letter.",
            field=field,
        )
    return name


def hash_api_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedApiKey:
    tenant: str
    key_id: str
    raw_key: str  # shown once, never stored

    @property
    def key_hash(self) -> str:
        return hash_api_key(self.raw_key)


def new_api_key(tenant: str) -> IssuedApiKey:
    key_id = secrets.token_hex(6)
    return IssuedApiKey(tenant, key_id, f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}")


@dataclass(frozen=True)
class ApiKeyRecord:
    tenant: str
    key_id: str
    key_hash: str
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class Principal:
    """Who is calling: always derived from a credential, never from a request body."""

    tenant: str
    key_id: str


@dataclass(frozen=True)
class KeySet:
    """Versioned HMAC secrets of one purpose. `current` signs/pseudonymizes new data."""

    current: str
    keys: dict[str, bytes] = field(default_factory=dict)

    def key(self, version: str | None = None) -> bytes:
        version = version or self.current
        try:
            return self.keys[version]
        except KeyError:
            raise NotFound(f"Unknown HMAC key version {version!s}.", field="key_version") from None

    def rotated(self) -> KeySet:
        number = max(int(v.lstrip("v")) for v in self.keys) + 1
        version = f"v{number}"
        return KeySet(current=version, keys={**self.keys, version: secrets.token_bytes(32)})

    def to_document(self) -> dict[str, object]:
        return {
            "current": self.current,
            "keys": {v: base64.b64encode(k).decode() for v, k in self.keys.items()},
        }

    @classmethod
    def from_document(cls, data: dict[str, object]) -> KeySet:
        keys = data["keys"]
        if not isinstance(keys, dict):
            raise ValueError("malformed key set")
        return cls(
            current=str(data["current"]),
            keys={str(v): base64.b64decode(str(k)) for v, k in keys.items()},
        )

    @classmethod
    def fresh(cls) -> KeySet:
        return cls(current="v1", keys={"v1": secrets.token_bytes(32)})


@dataclass(frozen=True)
class Keyring:
    tenant: str
    identity: KeySet
    ingest: KeySet

    def to_document(self) -> dict[str, object]:
        return {"tenant": self.tenant, "identity": self.identity.to_document(),
                "ingest": self.ingest.to_document()}

    @classmethod
    def from_document(cls, data: dict[str, object]) -> Keyring:
        identity, ingest = data["identity"], data["ingest"]
        if not isinstance(identity, dict) or not isinstance(ingest, dict):
            raise ValueError("malformed keyring")
        return cls(str(data["tenant"]), KeySet.from_document(identity), KeySet.from_document(ingest))


# The authorizer returns this as `usageIdentifierKey` (template.yaml: ApiKeySourceType
# AUTHORIZER), so API Gateway, and the local gateway, throttle each tenant in its own bucket.
# Clients never send it; it names a bucket and authenticates nothing. API Gateway key values are
# at least 20 characters: the prefix alone is 24.
USAGE_KEY_PREFIX = "infercrane-tenant-usage-"


def usage_identifier(tenant: str) -> str:
    return USAGE_KEY_PREFIX + tenant


class Authenticator:
    """The authorizer's whole job: one directory lookup. It needs no keyring, so the authorizer's
    cold start never builds a Secrets Manager client."""

    def __init__(self, directory: DirectoryStore):
        self._directory = directory

    def authenticate(self, raw_key: str | None) -> Principal:
        """Map a bearer key to its tenant. Unknown, malformed or revoked keys are all the same 401."""
        if not raw_key or not _KEY_RE.match(raw_key):
            raise Unauthorized("A valid API key is required.")
        record = self._directory.find_api_key(hash_api_key(raw_key))
        if record is None or not record.active:
            raise Unauthorized("A valid API key is required.")
        return Principal(tenant=record.tenant, key_id=record.key_id)


class TenancyService:
    def __init__(self, directory: DirectoryStore, keyrings: KeyringStore,
                 usage_plans: UsagePlans | None = None):
        self._directory = directory
        self._keyrings = keyrings
        self._usage_plans = usage_plans  # None: no usage plan to enroll in (the local stack)

    def authenticate(self, raw_key: str | None) -> Principal:
        return Authenticator(self._directory).authenticate(raw_key)

    def create_tenant(self, name: str, now: datetime) -> IssuedApiKey:
        validate_tenant_name(name, field="name")
        # The keyring first, then the tenant: a crash in between leaves a keyring nobody uses,
        # which the next attempt adopts (the other order left a tenant without a keyring, that
        # nothing could repair). Two concurrent creations share the one keyring.
        with contextlib.suppress(Conflict):
            self._keyrings.create(Keyring(name, KeySet.fresh(), KeySet.fresh()))
        self._directory.create_tenant(name, now)  # raises Conflict when it exists
        self._enroll(name)
        return self.create_api_key(name, now)

    def ensure_tenant(self, name: str, now: datetime) -> IssuedApiKey:
        """Idempotent provisioning (local stack, qualification): a new key for a tenant."""
        try:
            return self.create_tenant(name, now)
        except Conflict:
            self._enroll(name)  # repairs a tenant whose enrollment failed
            return self.create_api_key(name, now)

    def _enroll(self, tenant: str) -> None:
        if self._usage_plans is not None:
            self._usage_plans.enroll(tenant, usage_identifier(tenant))

    def create_api_key(self, tenant: str, now: datetime) -> IssuedApiKey:
        validate_tenant_name(tenant)
        if not self._directory.tenant_exists(tenant):
            raise NotFound("No such tenant.", field="tenant")
        issued = new_api_key(tenant)
        self._directory.put_api_key(
            ApiKeyRecord(tenant=tenant, key_id=issued.key_id, key_hash=issued.key_hash,
                         created_at=now)
        )
        return issued

    def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> None:
        validate_tenant_name(tenant)
        self._directory.revoke_api_key(tenant, key_id, now)

    def rotate_hmac_keys(self, tenant: str, purpose: str = "identity") -> str:
        """Add a new key version for `purpose` (identity|ingest); returns the new current version."""
        validate_tenant_name(tenant)
        if purpose not in ("identity", "ingest"):
            raise InvalidInput("purpose must be 'identity' or 'ingest'.", field="purpose")
        if not self._directory.tenant_exists(tenant):
            raise NotFound("No such tenant.", field="tenant")
        # A conditional write on the keyring's version, re-applied to the latest ring on a
        # conflict: concurrent rotations (of either purpose) each add their own version and lose
        # none (docs/architecture.md, "Read-modify-writes").
        if purpose == "identity":
            ring = self._keyrings.update(
                tenant, lambda r: Keyring(tenant, r.identity.rotated(), r.ingest))
            return ring.identity.current
        ring = self._keyrings.update(
            tenant, lambda r: Keyring(tenant, r.identity, r.ingest.rotated()))
        return ring.ingest.current
