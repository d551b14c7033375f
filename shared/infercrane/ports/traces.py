"""Ports: trace headers (a table) and the full trace documents (object storage)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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

    def find_by_prefix(self, tenant: str, digest_prefix: str, limit: int) -> list[str]:
        """Up to `limit` of the tenant's digests starting with `digest_prefix` (`sha256:<hex>`)."""


class DocumentStore(Protocol):
    """Whole JSON documents too large for an item or a Lambda response, by key."""

    def put_bytes(self, key: str, body: bytes, content_type: str = "application/json") -> None: ...

    def put_stream(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/json") -> int:
        """Store the concatenated chunks without holding them all; returns the size in bytes."""

    def get_bytes(self, key: str) -> bytes:
        """The stored bytes; NotFound when there is no such document."""

    def presigned_url(self, key: str, expires_s: int = 300) -> str:
        """A time-limited URL to GET the document directly from storage."""


class TraceBuildStore(Protocol):
    """Asynchronous trace builds: request, status and progress, by (tenant, build id)."""

    def put_build(self, tenant: str, build: Mapping[str, Any]) -> bool:
        """Create or replace the build record `build["build_id"]` of the tenant, unless the
        stored one is finished (succeeded or failed): then nothing is written and False."""

    def get_build(self, tenant: str, build_id: str) -> dict[str, Any] | None:
        """The tenant's build record, or None (another tenant's build is None too)."""
