"""Port: per-tenant API rate limits (API Gateway usage plans keyed by the authorizer)."""

from __future__ import annotations

from typing import Protocol


class UsagePlans(Protocol):
    def enroll(self, tenant: str, usage_key: str) -> None:
        """Make `usage_key` (what the authorizer returns as usageIdentifierKey for this tenant)
        count against the tenant usage plan. Idempotent."""
