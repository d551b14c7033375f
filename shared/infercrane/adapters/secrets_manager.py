"""Secrets Manager adapter for per-tenant HMAC keyrings, cached with a TTL in warm functions."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.domain.tenancy import Keyring
from infercrane.errors import Conflict, DependencyUnavailable, NotFound


class SecretsManagerKeyringStore:
    def __init__(self, client: Any, prefix: str, ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic):
        self._client = client
        self._prefix = prefix.rstrip("/")
        self._ttl = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, Keyring]] = {}
        self._lock = threading.Lock()

    def _name(self, tenant: str) -> str:
        return f"{self._prefix}/tenants/{tenant}"

    def create(self, keyring: Keyring) -> None:
        try:
            self._client.create_secret(
                Name=self._name(keyring.tenant),
                Description="InferCrane tenant HMAC keyring (identity pseudonymization, ingest signing).",
                SecretString=json.dumps(keyring.to_json()),
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceExistsException":
                raise Conflict("Tenant keyring already exists.", field="tenant") from exc
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        self._remember(keyring)

    def get(self, tenant: str) -> Keyring:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(tenant)
        if hit and now - hit[0] < self._ttl:
            return hit[1]
        try:
            value = self._client.get_secret_value(SecretId=self._name(tenant))
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                raise NotFound("No such tenant.", field="tenant") from exc
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        keyring = Keyring.from_json(json.loads(value["SecretString"]))
        self._remember(keyring)
        return keyring

    def put(self, keyring: Keyring) -> None:
        try:
            self._client.put_secret_value(SecretId=self._name(keyring.tenant),
                                          SecretString=json.dumps(keyring.to_json()))
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("Secrets Manager is unavailable.") from exc
        self._remember(keyring)

    def _remember(self, keyring: Keyring) -> None:
        with self._lock:
            self._cache[keyring.tenant] = (self._clock(), keyring)
