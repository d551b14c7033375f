"""Port: per-tenant HMAC keyrings (AWS Secrets Manager in production)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from infercrane.domain.tenancy import Keyring


class KeyringStore(Protocol):
    def create(self, keyring: Keyring) -> None: ...

    def get(self, tenant: str) -> Keyring:
        """The tenant's keyring (cached with a TTL); raise `NotFound` for an unknown tenant."""

    def update(self, tenant: str, change: Callable[[Keyring], Keyring]) -> Keyring:
        """Apply `change` to the latest stored keyring (never a cached one) and store the result
        only if nothing else was stored meanwhile; on a conflict read again and re-apply. Returns
        the keyring stored. `change` may therefore run more than once."""
