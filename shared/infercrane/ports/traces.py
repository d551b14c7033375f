"""Ports: trace headers (a table) and the full trace documents (object storage)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class HeaderPage:
    headers: list[dict[str, Any]]
    next_token: str | None


class TraceStore(Protocol):
    def put_header(self, tenant: str, header: Mapping[str, Any]) -> bool:
        """Store a trace header under (tenant, digest). False, changing nothing, if one exists."""

    def get_header(self, tenant: str, digest: str) -> dict[str, Any] | None:
        """The tenant's header for `digest`, or None (another tenant's trace is None too)."""

    def list_headers(self, tenant: str, deployment: str, limit: int,
                     next_token: str | None = None) -> HeaderPage:
        """A deployment's headers, newest first, `limit` at a time; `next_token` is opaque."""

    def digests_with_prefix(self, tenant: str, prefix: str, limit: int) -> list[str]:
        """Up to `limit` of the tenant's trace digests beginning with `prefix` (`sha256:...`)."""


class DocumentStore(Protocol):
    """Whole JSON documents too large for an item or a Lambda response, by key."""

    def put_bytes(self, key: str, body: bytes, content_type: str = "application/json") -> None: ...

    def get_bytes(self, key: str) -> bytes:
        """The stored bytes; NotFound when there is no such document."""

    def presigned_url(self, key: str, expires_s: int = 300) -> str:
        """A time-limited URL to GET the document directly from storage."""
