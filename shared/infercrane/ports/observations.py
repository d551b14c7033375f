"""Port: persisted observations, read per (tenant, deployment) in (arrival, id) order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
    # Observations refused for a reason of their own: index in the sequence given -> a code of
    # domain.observation.STORE_REFUSALS. Everything else in the call was stored.
    refused: Mapping[int, str] = field(default_factory=dict)


class ObservationStore(Protocol):
    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        """Idempotent: re-putting an observation with the same (arrival, id) changes nothing.

        All-or-item: an observation the store cannot hold (too large, or a client id already
        naming other content: `fingerprint` differs) is listed in `refused` and the rest are
        stored. `DependencyUnavailable` only for a transient failure; a re-send then converges
        to every storable observation stored once."""

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, decided: Mapping[str, str] | None = None,
              ) -> Iterator[StoredObservation]:
        """Observations with start_ms <= arrival_ms < end_ms in (arrival_ms, observation_id)
        order, stopping after `limit`; never a Scan. A store that can hold one id with two
        contents (segments) returns one per id, and an iterator whose `counts.conflicts` says,
        once exhausted, how many it left out (domain/trace_window.py:id_conflicts), and whose
        `named` maps each client id to (a form of) the fingerprint kept, opaque to callers.
        `decided` is such a map from an earlier read of a wider window: this read keeps, for
        those ids, what that one kept."""

    def retained(self, tenant: str, deployment: str) -> bool:
        """Whether any observation of the deployment may be stored, from an index alone: no
        row is read for it (an indexed batch whose rows are gone counts)."""

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        """Delete a deployment's observations (optionally only those arriving before a time)."""

    def delete_page(self, tenant: str, deployment: str, before_ms: int | None,
                    ) -> tuple[int, bool]:
        """As `delete`, with the work of one call bounded: (rows deleted, whether finished).
        Not finished: the same call again continues (idempotent)."""


class LegacyObservations(Protocol):
    """Observations stored one item each, before segments: read by the migration, deleted with
    the segments until their TTL takes them."""

    def deployments(self, tenant: str, cursor: str | None, limit: int,
                    ) -> tuple[list[str], str | None]:
        """A page of the tenant's deployments with legacy items, and the next page's cursor."""

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None) -> Iterator[StoredObservation]:
        """As `ObservationStore.query`."""


    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        """As `ObservationStore.delete`."""

    def delete_page(self, tenant: str, deployment: str, before_ms: int | None,
                    limit: int | None) -> tuple[int, bool]:
        """`delete` of at most `limit` items: (observations deleted, whether finished)."""

    def delete_import(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                      id_prefix: str) -> int:
        """One import's observations (its id prefix within its arrival range)."""

    def missing(self, rows: Sequence[StoredObservation]) -> list[StoredObservation]:
        """Those of `rows` no longer stored (consistent reads: deleted since they were read)."""


class SegmentWriter(Protocol):
    def put_migrated(self, rows: Sequence[StoredObservation]) -> bool:
        """Rows of one (tenant, deployment, hour) as one segment; True when it is new."""

    def drop_migrated(self, rows: Sequence[StoredObservation]) -> None:
        """Take these rows out of the segments again (deleted while they were copied)."""
