"""Port: per-tenant HMAC keyrings (AWS Secrets Manager in production)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from infercrane.domain.tenancy import Keyring


class KeyringStore(Protocol):
    def create(self, keyring: Keyring) -> None: ...

    def get(self, tenant: str) -> Keyring:
        """The tenant's keyring (cached with a TTL); raise `NotFound` for an unknown tenant."""

    def put(self, keyring: Keyring) -> None: ...
