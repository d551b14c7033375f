"""Secrets Manager adapter for per-tenant HMAC keyrings, cached with a TTL in warm functions.

A keyring changes by compare-and-swap on its version (`update`): the new ring is stored as a
version labelled `PENDING`, then the label `AWSCURRENT` is moved to it from the version it was
computed from. Secrets Manager refuses that move when `RemoveFromVersionId` no longer holds
`AWSCURRENT` (UpdateSecretVersionStage), so of two concurrent rotations one wins and the other
reads the winner's ring and applies its change again. moto enforces the same check (checked in
moto 5.2.5: `InvalidParameterException` when the stage is not on that version). A crash after
the first write leaves a version that is not current: nothing reads it, nothing is lost.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.domain.tenancy import Keyring
from infercrane.errors import Conflict, DependencyUnavailable, NotFound

CURRENT = "AWSCURRENT"
# A label for the version being proposed (PutSecretValue needs one, or it would move AWSCURRENT
# unconditionally). Concurrent proposals take it from each other: they are addressed by id.
PENDING = "INFERCRANE_PENDING"
MAX_ATTEMPTS = 12


class SecretsManagerKeyringStore:
    def __init__(self, client: Any, prefix: str, ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self._client = client
        self._prefix = prefix.rstrip("/")
        self._ttl = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, Keyring]] = {}
        self._lock = threading.Lock()
        self._sleep = sleep
        # Tests only: called after each write request, to crash a rotation between its writes.
        self.fault_after_write: Callable[[], None] | None = None

    def _name(self, tenant: str) -> str:
        return f"{self._prefix}/tenants/{tenant}"

    def create(self, keyring: Keyring) -> None:
        try:
            self._client.create_secret(
                Name=self._name(keyring.tenant),
                Description="InferCrane tenant HMAC keyring (identity pseudonymization, ingest signing).",
                SecretString=json.dumps(keyring.to_document()),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceExistsException":
                raise Conflict("Tenant keyring already exists.", field="tenant") from exc
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        self._wrote()
        self._remember(keyring)

    def get(self, tenant: str) -> Keyring:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(tenant)
        if hit and now - hit[0] < self._ttl:
            return hit[1]
        keyring = self._current(self._name(tenant))[1]
        self._remember(keyring)
        return keyring

    def update(self, tenant: str, change: Callable[[Keyring], Keyring]) -> Keyring:
        name = self._name(tenant)
        for attempt in range(MAX_ATTEMPTS):
            base_id, ring = self._current(name)
            ring = change(ring)
            try:
                proposed = self._client.put_secret_value(
                    SecretId=name, SecretString=json.dumps(ring.to_document()),
                    ClientRequestToken=str(uuid.uuid4()), VersionStages=[PENDING])["VersionId"]
                self._wrote()
                self._client.update_secret_version_stage(
                    SecretId=name, VersionStage=CURRENT, MoveToVersionId=proposed,
                    RemoveFromVersionId=base_id)
            except ClientError as exc:
                # Which error code a lost race gets is not promised: the version says it.
                if self._current(name)[0] == base_id:
                    raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
                self._sleep(random.uniform(0, min(1.0, 0.02 * 2 ** attempt)))
                continue
            except BotoCoreError as exc:
                raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
            self._wrote()
            self._remember(ring)
            return ring
        raise DependencyUnavailable("The keyring is being changed by too many callers at once.")

    def _current(self, name: str) -> tuple[str, Keyring]:
        """The version id holding AWSCURRENT and its keyring, read now (never cached)."""
        try:
            value = self._client.get_secret_value(SecretId=name, VersionStage=CURRENT)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                raise NotFound("No such tenant.", field="tenant") from exc
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        return value["VersionId"], Keyring.from_document(json.loads(value["SecretString"]))

    def _wrote(self) -> None:
        if self.fault_after_write is not None:
            self.fault_after_write()

    def _remember(self, keyring: Keyring) -> None:
        with self._lock:
            self._cache[keyring.tenant] = (self._clock(), keyring)
