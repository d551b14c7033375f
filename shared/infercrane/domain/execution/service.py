"""What the execution routes call: revisions set and read, evidence recorded once and signed."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.attestation import execution_statement
from infercrane.domain.execution.evidence_schema import check_evidence, check_execution_id
from infercrane.domain.execution.revisions import Revision, check_revision_name, make_revision
from infercrane.domain.replay import check_deployment
from infercrane.errors import NotFound
from infercrane.ports.execution import ExecutionStore, RevisionStore
from infercrane.ports.signing import EvidenceSigner


class ExecutionService:
    def __init__(self, revisions: RevisionStore, executions: ExecutionStore,
                 now: Callable[[], datetime],
                 signer: Callable[[], EvidenceSigner] | None = None):
        self._revisions = revisions
        self._executions = executions
        self._now = now
        self._signer = signer

    def set_revision(self, tenant: str, deployment: str, revision: str, url: str,
                     model: str | None, api_key_env: str | None) -> Revision:
        rev = make_revision(deployment, revision, url, model, api_key_env, self._now())
        self._revisions.put_revision(tenant, rev)
        return rev

    def get_revision(self, tenant: str, deployment: str, revision: str) -> Revision:
        check_deployment(deployment)
        check_revision_name(revision)
        found = self._revisions.get_revision(tenant, deployment, revision)
        if found is None:
            raise NotFound("No such revision for this deployment.", field="revision")
        return found

    def record(self, tenant: str, document: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Store evidence once. (document, created): re-posting the same document changes
        nothing; the same id with different content is an idempotency conflict."""
        doc = check_evidence(document)
        if self._signer is None:
            raise RuntimeError("this execution service has no signing key")
        envelope = self._signer().sign(execution_statement(doc))
        created = self._executions.put_execution(tenant, doc["execution_id"], doc["digest"],
                                                 json.dumps(doc, separators=(",", ":")),
                                                 rfc3339(self._now()),
                                                 json.dumps(envelope, separators=(",", ":")),
                                                 deployment=doc["source"]["deployment"])
        return doc, created

    def latest(self, tenant: str, deployment: str) -> dict[str, Any]:
        """The deployment's most recently recorded execution evidence."""
        execution_id = self._executions.latest_execution_id(tenant, check_deployment(deployment))
        if execution_id is None:
            raise NotFound("This deployment has no recorded execution.", field="deployment")
        return self.get(tenant, execution_id)

    def get(self, tenant: str, execution_id: str) -> dict[str, Any]:
        raw = self._executions.get_execution(tenant, check_execution_id(execution_id))
        if raw is None:
            raise NotFound("No such execution.", field="id")
        doc: dict[str, Any] = json.loads(raw)
        return doc

    def attestation(self, tenant: str, execution_id: str) -> dict[str, Any]:
        """The DSSE envelope of the service's signed statement about stored evidence."""
        raw = self._executions.get_attestation(tenant, check_execution_id(execution_id))
        if raw is None:
            raise NotFound("No such execution.", field="id")
        envelope: dict[str, Any] = json.loads(raw)
        return envelope
