"""Port: persisted observations. One (tenant, deployment) is one partition, in (arrival, id) order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from infercrane.domain.observation import StoredObservation


@dataclass(frozen=True)
class WriteStats:
    items: int
    requests: int  # BatchWriteItem calls, retries included
    retries: int
    # Added by capture (optional, so existing callers keep working): items that were already
    # stored (same key) and so not written again, and the BatchGetItem calls that found them.
    skipped: int = 0
    read_requests: int = 0


class ObservationStore(Protocol):
    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        """Idempotent: re-putting an observation with the same (arrival, id) changes nothing."""

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, page_size: int | None = None) -> Iterator[StoredObservation]:
        """Observations with start_ms <= arrival_ms < end_ms in (arrival_ms, observation_id)
        order, stopping after `limit`. One Query (paginated), never a Scan."""

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        """Delete a deployment's observations (optionally only those arriving before a time)."""
