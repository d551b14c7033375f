"""Ports of replay execution: where revisions and evidence are kept, and the load generator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from infercrane.domain.execution import ExecutionPlan, Revision, RunOutcome


class RevisionStore(Protocol):
    def put_revision(self, tenant: str, revision: Revision) -> None:
        """Create or replace the tenant's endpoint of one deployment revision."""

    def get_revision(self, tenant: str, deployment: str, revision: str) -> Revision | None: ...


class ExecutionStore(Protocol):
    def put_execution(self, tenant: str, execution_id: str, digest: str, document: str,
                      recorded_at: str, attestation: str | None = None,
                      deployment: str | None = None) -> bool:
        """Store evidence once: True when new, False when the same digest is already stored;
        raise `IdempotencyConflict` when the id holds a different document."""

    def get_execution(self, tenant: str, execution_id: str) -> str | None:
        """The stored evidence document (JSON text), or None."""

    def latest_execution_id(self, tenant: str, deployment: str) -> str | None:
        """The id of the deployment's most recently recorded execution, or None."""

    def get_attestation(self, tenant: str, execution_id: str) -> str | None:
        """The DSSE envelope (JSON text) stored with the evidence, or None."""


class LoadGenerator(Protocol):
    """Runs an execution plan against its target (AIPerf as a subprocess: its flags and summary
    format stay in the adapter, the outcome carries measured figures in the evidence's terms)."""

    def run(self, plan: ExecutionPlan, workdir: Path, *, api_key: str | None,
            on_progress: Callable[[int], None]) -> RunOutcome:
        """Never raises for a failed or interrupted run: the outcome names the failure.
        `on_progress` receives the number of requests completed so far."""
