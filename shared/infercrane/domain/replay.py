"""The trace service: build a trace from a window of persisted observations, store it, read it.

Building reads observations (one paginated Query) and writes the document and its header. It sends
no workload and creates no infrastructure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from infercrane import __version__
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.attestation import SIGNING_SCHEME, export_statement, trace_statement
from infercrane.domain.digest import normalize_digest_prefix
from infercrane.domain.trace import build_trace, trace_header
from infercrane.domain.windows import resolve_window
from infercrane.errors import Conflict, InvalidInput, NotFound
from infercrane.ports.observations import ObservationStore
from infercrane.ports.signing import EvidenceSigner
from infercrane.ports.traces import DocumentStore, HeaderPage, TraceStore

MAX_REQUESTS_LIMIT = 100_000
_NO_END_MS = 10**13 - 1  # the largest arrival the observation sort key can hold (13 digits)
FULL_DIGEST_LENGTH = len("sha256:") + 64
_DEPLOYMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


def document_key(tenant: str, digest: str) -> str:
    return f"traces/{tenant}/{digest}.json"


def attestation_key(tenant: str, digest: str) -> str:
    """The DSSE envelope of the trace's signed statement, beside the document."""
    return f"traces/{tenant}/{digest}.intoto.json"


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
                 software: str = f"infercrane {__version__}",
                 signer: Callable[[], EvidenceSigner] | None = None):
        """`page_size` fixes the store's page size; `max_page_items` instead caps it and spreads
        the read over equal pages, so the last page reads (almost) nothing beyond the limit."""
        self._observations = observations
        self._traces = traces
        self._documents = documents
        self._page_size = page_size
        self._max_page_items = max_page_items
        self._software = software
        self._signer = signer

    def _sign(self) -> EvidenceSigner:
        if self._signer is None:
            raise RuntimeError("this trace service has no signing key")
        return self._signer()

    def attest(self, tenant: str, document: dict[str, Any]) -> None:
        """Sign the document's statement and store the envelope beside it (before the header, so
        a listed trace is always signed)."""
        envelope = self._sign().sign(trace_statement(document))
        self._documents.put_bytes(attestation_key(tenant, document["digest"]),
                                  json.dumps(envelope, separators=(",", ":")).encode("utf-8"))

    def attestation(self, tenant: str, digest: str) -> dict[str, Any]:
        header = self.header(tenant, digest)
        envelope: dict[str, Any] = json.loads(
            self._documents.get_bytes(attestation_key(tenant, header["digest"])))
        return envelope

    def export_attestation(self, tenant: str, digest: str,
                           file_name: str | None = None) -> dict[str, Any]:
        """A signed statement about the AIPerf export of a stored trace: the service derives the
        JSONL from its own copy of the document (the same exporter the CLI runs), so it signs
        only bytes it produced itself. `file_name` only names the subject (default
        `aiperf-export.jsonl`); the digest is what binds it."""
        header = self.header(tenant, digest)  # another tenant's trace: 404 before anything else
        file_name = "aiperf-export.jsonl" if file_name is None else file_name
        if not isinstance(file_name, str) or not _FILE_NAME.match(file_name):
            raise InvalidInput("A file name is 1-255 letters, digits, '.', '_' or '-'.",
                               field="name")
        document = json.loads(self._documents.get_bytes(document_key(tenant, header["digest"])))
        body = mooncake_jsonl(document).encode("utf-8")
        return self._sign().sign(export_statement(file_name, body, document))

    def signing_key(self) -> dict[str, str]:
        signer = self._sign()
        return {"public_key_pem": signer.public_key_pem(), "key_id": signer.key_id(),
                "scheme": SIGNING_SCHEME}

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
        if not found and not self.known_deployment(tenant, deployment):
            # An empty trace labelled `observed` would claim evidence of a deployment never seen.
            raise NotFound("This deployment has no observations at all.", field="deployment")
        return build_trace(deployment=deployment, window=bounds, max_requests=max_requests,
                           observations=found[:max_requests], truncated=truncated, built_at=now,
                           request_id=request_id, software=self._software)

    def known_deployment(self, tenant: str, deployment: str) -> bool:
        """Whether any observation of the deployment is retained (one Query, one item)."""
        return any(True for _ in self._observations.query(tenant, deployment, 0, _NO_END_MS,
                                                          limit=1, page_size=1))

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
        self.attest(tenant, document)
        if not self._traces.put_header(tenant, header):
            # Built concurrently by another request: the stored header wins.
            return self.header(tenant, document["digest"]), False
        return header, True

    def header(self, tenant: str, digest: str) -> dict[str, Any]:
        """The header of `digest`, or of the one trace whose digest starts with that prefix."""
        wanted = normalize_digest_prefix(digest)
        if len(wanted) < FULL_DIGEST_LENGTH:
            matches = self._traces.find_by_prefix(tenant, wanted, limit=2)
            if len(matches) > 1:
                raise Conflict("This digest prefix matches more than one trace; give more digits.",
                               field="digest", code="ambiguous_digest")
            wanted = matches[0] if matches else wanted
        found = self._traces.get_header(tenant, wanted) if len(wanted) == FULL_DIGEST_LENGTH else None
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
