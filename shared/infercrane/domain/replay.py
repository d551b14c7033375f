"""The trace service: build a trace from a window of persisted observations, store it, read it.

Building reads observations (one paginated Query) and writes the document and its header. It sends
no workload and creates no infrastructure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from infercrane import __version__
from infercrane.domain.digest import DIGEST_PATTERN, normalize_digest, verify_digest
from infercrane.domain.drift import compare_traces
from infercrane.domain.trace import build_trace, trace_header
from infercrane.domain.windows import resolve_window
from infercrane.errors import InvalidInput, NotFound, VerificationFailed
from infercrane.ports.observations import ObservationStore
from infercrane.ports.traces import DocumentStore, HeaderPage, TraceStore

MAX_REQUESTS_LIMIT = 100_000
_DEPLOYMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def document_key(tenant: str, digest: str) -> str:
    return f"traces/{tenant}/{digest}.json"


def comparison_key(tenant: str, digest: str) -> str:
    """The one place comparison documents are stored (signed like traces by a later change)."""
    return f"comparisons/{tenant}/{digest}.json"


_PREFIX = re.compile(r"^(sha256:)?[0-9a-f]{6,64}$")


def check_deployment(deployment: str) -> str:
    if not isinstance(deployment, str) or not _DEPLOYMENT.match(deployment):
        raise InvalidInput("A deployment name is 1-128 letters, digits, '.', '_' or '-'.",
                           field="deployment")
    return deployment


@dataclass(frozen=True)
class DocumentAccess:
    """Either the document's bytes (small enough to return) or a URL to fetch it from storage."""

    body: bytes | None = None
    url: str | None = None


class TraceService:
    def __init__(self, observations: ObservationStore, traces: TraceStore,
                 documents: DocumentStore, *, page_size: int | None = None,
                 max_page_items: int | None = None,
                 software: str = f"infercrane {__version__}"):
        """`page_size` fixes the store's page size; `max_page_items` instead caps it and spreads
        the read over equal pages, so the last page reads (almost) nothing beyond the limit."""
        self._observations = observations
        self._traces = traces
        self._documents = documents
        self._page_size = page_size
        self._max_page_items = max_page_items
        self._software = software

    def _pages(self, wanted: int) -> int | None:
        if self._page_size is not None or self._max_page_items is None:
            return self._page_size
        pages = -(-wanted // self._max_page_items)
        return -(-wanted // pages)

    def build_document(self, tenant: str, deployment: str, window: str, until: datetime | None,
                       max_requests: int, now: datetime,
                       request_id: str | None = None) -> dict[str, Any]:
        check_deployment(deployment)
        if not isinstance(max_requests, int) or not 1 <= max_requests <= MAX_REQUESTS_LIMIT:
            raise InvalidInput(f"max_requests must be between 1 and {MAX_REQUESTS_LIMIT}.",
                               field="max_requests")
        bounds = resolve_window(window, until, now)
        # One beyond the maximum tells whether the window held more than was kept.
        found = list(self._observations.query(tenant, deployment, bounds.start_ms, bounds.end_ms,
                                              limit=max_requests + 1,
                                              page_size=self._pages(max_requests + 1)))
        truncated = len(found) > max_requests
        return build_trace(deployment=deployment, window=bounds, max_requests=max_requests,
                           observations=found[:max_requests], truncated=truncated, built_at=now,
                           request_id=request_id, software=self._software)

    def build(self, tenant: str, deployment: str, window: str, until: datetime | None,
              max_requests: int, now: datetime,
              request_id: str | None = None) -> tuple[dict[str, Any], bool]:
        """(header, created). The same evidence built again returns the first header unchanged."""
        document = self.build_document(tenant, deployment, window, until, max_requests, now,
                                       request_id)
        existing = self._traces.get_header(tenant, document["digest"])
        if existing is not None:
            return existing, False
        # Stored as compact JSON: the digest is over the canonical form, which any reader
        # recomputes (`trace verify`), so a second canonical pass here would buy nothing.
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        header = trace_header(document, size_bytes=len(body))
        # Document first: a header never points at a document that is not there.
        self._documents.put_bytes(document_key(tenant, document["digest"]), body)
        if not self._traces.put_header(tenant, header):
            # Built concurrently by another request: the stored header wins.
            return self.header(tenant, document["digest"]), False
        return header, True

    def header(self, tenant: str, digest: str) -> dict[str, Any]:
        found = self._traces.get_header(tenant, normalize_digest(digest))
        if found is None:
            raise NotFound("No such trace.", field="digest")
        return found

    def document(self, tenant: str, digest: str, inline_limit_bytes: int,
                 url_expires_s: int = 300) -> DocumentAccess:
        header = self.header(tenant, digest)
        key = document_key(tenant, header["digest"])
        if int(header["document"]["size_bytes"]) <= inline_limit_bytes:
            return DocumentAccess(body=self._documents.get_bytes(key))
        return DocumentAccess(url=self._documents.presigned_url(key, url_expires_s))

    def list(self, tenant: str, deployment: str, limit: int = 100,
             next_token: str | None = None) -> HeaderPage:
        check_deployment(deployment)
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000.", field="limit")
        return self._traces.list_headers(tenant, deployment, limit, next_token)

    # -- drift ------------------------------------------------------------------------------------
    def resolve(self, tenant: str, ref: str, *, field: str) -> str:
        """A full digest, or a unique prefix of at least 6 hex digits, to the tenant's digest."""
        value = ref.strip().lower() if isinstance(ref, str) else ""
        if not _PREFIX.match(value):
            raise InvalidInput("A trace reference is a digest (sha256:<64 hex>) or a prefix of at "
                               "least 6 hex digits.", field=field)
        full = value if value.startswith("sha256:") else "sha256:" + value
        if DIGEST_PATTERN.match(full):
            return str(self.header(tenant, full)["digest"])
        found = self._traces.digests_with_prefix(tenant, full, limit=2)
        if not found:
            raise NotFound("No trace has this digest prefix.", field=field)
        if len(found) > 1:
            raise InvalidInput("This prefix matches more than one trace: give more digits.",
                               field=field)
        return found[0]

    def _verified_document(self, tenant: str, digest: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(
            self._documents.get_bytes(document_key(tenant, digest)))
        ok, _ = verify_digest(document)
        if not ok or document.get("digest") != digest:
            raise VerificationFailed("A stored trace document does not match its digest.",
                                     field="digest")
        return document

    def compare(self, tenant: str, a: str, b: str, significance: float,
                now: datetime) -> dict[str, Any]:
        """Compare two of the tenant's traces; the comparison is stored and returned."""
        digest_a = self.resolve(tenant, a, field="a")
        digest_b = self.resolve(tenant, b, field="b")
        document = compare_traces(self._verified_document(tenant, digest_a),
                                  self._verified_document(tenant, digest_b),
                                  significance=significance, built_at=now,
                                  software=self._software)
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self._documents.put_bytes(comparison_key(tenant, document["digest"]), body)
        return document

    def comparison(self, tenant: str, digest: str) -> dict[str, Any]:
        key = comparison_key(tenant, normalize_digest(digest))
        try:
            stored: dict[str, Any] = json.loads(self._documents.get_bytes(key))
        except NotFound as exc:
            raise NotFound("No such trace comparison.", field="digest") from exc
        return stored
