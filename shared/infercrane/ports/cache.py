"""Port: the cache table (observations, their audit trail, prefetch requests) and its sweep index.

The sweep index is sparse: an item is in it only while it needs attention at a due time (an
observation that will expire, a request that may get stuck), so the sweeper Queries due items and
never Scans. Every write that matters is conditional; a `False`/`None` result means the condition
did not hold (someone else won the race), never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from infercrane.domain.cache import CacheObservation
    from infercrane.domain.prefetch import PrefetchRequest, RequestRef


@dataclass(frozen=True)
class SweepEntry:
    kind: str  # "obs" | "pf"
    pk: str
    sk: str
    token: str  # the index sort key as read: a conditional write checks it is unchanged
    due: datetime
    tenant: str
    item_id: str  # a prefetch request's id ("" for observations)


class CacheStore(Protocol):
    # -- observations ----------------------------------------------------------------------
    def put_observation(self, obs: CacheObservation, *, sweep_due: datetime | None) -> bool:
        """Store as the current observation of (tenant, model, adapter, location) unless a
        newer one (later `observed_at`) is stored already; False when superseded."""

    def list_observations(self, tenant: str, model: str, adapter: str | None,
                          location: str | None) -> list[CacheObservation]: ...

    def append_audit(self, obs: CacheObservation, event: str, at: datetime) -> None: ...

    def due(self, kind: str, now: datetime, limit: int) -> list[SweepEntry]:
        """Items of `kind` whose due time is at or before `now` (Query on the sweep index)."""

    def expire_observation(self, entry: SweepEntry, now: datetime) -> CacheObservation | None:
        """Mark the observation `unknown` and drop it from the index, if still as read."""

    def postpone(self, entry: SweepEntry, due: datetime, *, count_redispatch: bool = False) -> bool:
        """Move a due item to a later due time, if still as read; with `count_redispatch`, also
        add one to a prefetch request's `redispatches`."""

    # -- prefetch requests -----------------------------------------------------------------
    def latest_request(self, tenant: str, key_hash: str) -> PrefetchRequest | None: ...

    def get_request(self, ref: RequestRef) -> PrefetchRequest | None: ...

    def create_request(self, request: PrefetchRequest, key_hash: str,
                       sweep_due: datetime) -> bool:
        """Put a new attempt; False when that attempt exists already."""

    def update_status(self, ref: RequestRef, from_statuses: tuple[str, ...], to_status: str,
                      now: datetime, *, reason: str | None, sweep_due: datetime | None,
                      dispatched: bool) -> PrefetchRequest | None:
        """Conditional on the current status being one of `from_statuses`; None otherwise.
        `sweep_due` None removes the request from the sweep index."""

    def note_dispatch(self, ref: RequestRef, now: datetime) -> PrefetchRequest | None:
        """Count a send (dispatched_at, dispatch_count) whatever the status."""

    def set_resource(self, ref: RequestRef, key: str, value: str, now: datetime) -> str | None:
        """Set resources[key] only if absent; the stored value (None: no such request)."""

    def mark_release(self, ref: RequestRef, now: datetime) -> PrefetchRequest | None: ...
