"""Port: the directory of tenants and API keys (hashes only)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from infercrane.domain.tenancy import ApiKeyRecord


class DirectoryStore(Protocol):
    def create_tenant(self, tenant: str, now: datetime) -> None:
        """Create a tenant; raise `Conflict` when it already exists."""

    def tenant_exists(self, tenant: str) -> bool: ...

    def put_api_key(self, record: ApiKeyRecord) -> None: ...

    def find_api_key(self, key_hash: str) -> ApiKeyRecord | None: ...

    def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> None:
        """Revoke a tenant's key; raise `NotFound` when the tenant has no such key."""
