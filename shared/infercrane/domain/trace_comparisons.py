"""Drift comparisons between a tenant's stored traces (`trace compare`): resolved by digest or
prefix, read back with their digests verified, compared (`domain/drift.py`), stored and signed.
Mixed into `TraceService`, whose storage, signer and trace lookup it uses."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infercrane.domain.attestation import comparison_statement
from infercrane.domain.digest import normalize_digest
from infercrane.domain.drift import compare_traces
from infercrane.errors import Conflict, InvalidInput, NotFound
from infercrane.ports.traces import DocumentStore

if TYPE_CHECKING:
    from infercrane.ports.signing import EvidenceSigner


def comparison_key(tenant: str, digest: str) -> str:
    """The one place comparison documents are stored."""
    return f"comparisons/{tenant}/{digest}.json"


def comparison_attestation_key(tenant: str, digest: str) -> str:
    """The DSSE envelope of the service's signed statement about a comparison, beside it."""
    return f"comparisons/{tenant}/{digest}.intoto.json"


class TraceComparisons:
    _documents: DocumentStore
    _software: str

    if TYPE_CHECKING:  # provided by TraceService
        def _sign(self) -> EvidenceSigner: ...
        def header(self, tenant: str, digest: str) -> dict[str, Any]: ...
        def _verified_document(self, tenant: str, digest: str) -> dict[str, Any]: ...

    def resolve(self, tenant: str, ref: str, *, field: str) -> str:
        """A full digest, or a unique prefix of at least 6 hex digits, to the tenant's digest
        (the one prefix rule of `header`, its errors pointed at `field`)."""
        if not isinstance(ref, str):
            raise InvalidInput("A trace reference is a digest or a prefix of one.", field=field)
        try:
            return str(self.header(tenant, ref)["digest"])
        except (InvalidInput, NotFound, Conflict) as exc:
            raise type(exc)(exc.message, field=field, code=exc.code) from None

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
        envelope = self._sign().sign(comparison_statement(document))
        self._documents.put_bytes(comparison_attestation_key(tenant, document["digest"]),
                                  json.dumps(envelope, separators=(",", ":")).encode("utf-8"))
        return document

    def comparison_attestation(self, tenant: str, digest: str) -> dict[str, Any]:
        return self._stored(comparison_attestation_key(tenant, normalize_digest(digest)))

    def comparison(self, tenant: str, digest: str) -> dict[str, Any]:
        return self._stored(comparison_key(tenant, normalize_digest(digest)))

    def _stored(self, key: str) -> dict[str, Any]:
        """A comparison's stored JSON (the document or its envelope); missing is a 404."""
        try:
            stored: dict[str, Any] = json.loads(self._documents.get_bytes(key))
        except NotFound as exc:
            raise NotFound("No such trace comparison.", field="digest") from exc
        return stored
