"""The capacity service: what the routes and functions call (ingest, aggregate, report).

Each entry point imports the part of the package it runs when first called, so a function's cold
start pays only for its own: the lifecycle function never loads the aggregator or the report, the
aggregate function never builds the attempt's input model (intake.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infercrane.domain import classifier as _classifier
from infercrane.domain.validation import TENANT_RE
from infercrane.domain.windows import epoch_ms
from infercrane.errors import DependencyUnavailable, InvalidInput, PayloadTooLarge

if TYPE_CHECKING:
    from infercrane.domain.capacity.aggregate import AggregateResult, Aggregator
    from infercrane.domain.capacity.attempts import StoredAttempt
    from infercrane.domain.capacity.intake import IngestResult
    from infercrane.domain.capacity.rollups import HourRollup
    from infercrane.ports.capacity import CapacityStore

log = logging.getLogger(__name__)


class CapacityService:
    def __init__(self, store: CapacityStore, *, classify: Callable[..., Any] = _classifier.classify,
                 version: str = _classifier.CLASSIFIER_VERSION,
                 previous_versions: Sequence[str] = _classifier.PREVIOUS_VERSIONS,
                 settle_ms: int = 0):
        self.store = store
        self.classify = classify
        self.version = version
        self.previous_versions = [v for v in previous_versions if v != version]
        # A dirty mark is cleared only once it is this old, so index propagation has settled.
        self.settle_ms = settle_ms

    # -- ingest ---------------------------------------------------------------------------------
    def ingest(self, tenant: str, items: Any, now: datetime) -> IngestResult:
        """Validate and store a batch. Re-sending an attempt id is accepted and changes nothing."""
        from infercrane.domain.batch import ItemError, checked_items
        from infercrane.domain.capacity.intake import IngestResult, validate_attempt

        checked_items(items, "attempts")
        now_ms = epoch_ms(now)
        errors: list[ItemError] = []
        valid: dict[str, StoredAttempt] = {}
        accepted = rejected = 0
        for i, raw in enumerate(items):
            result = validate_attempt(tenant, i, raw, now_ms, self.classify, self.version)
            if isinstance(result, list):
                rejected += 1
                errors.extend(result)
                continue
            accepted += 1
            valid.setdefault(result.attempt_id, result)  # first occurrence in a batch wins
        existing = self.store.existing_attempt_ids(tenant, list(valid)) if valid else set()
        new = [a for a in valid.values() if a.attempt_id not in existing]
        # Every valid item re-marks its hour, so a retried request heals a marker lost to a crash;
        # marked even when the store refuses one attempt's content (a 422 raised after the others
        # were written), or those others would never be rolled up.
        hours = {a.hour for a in valid.values()}
        try:
            # Counted by the store: a concurrent request may have stored some of them meanwhile.
            stored = self.store.put_attempts(new) if new else 0
        finally:
            if hours:
                self.store.mark_dirty(tenant, sorted(hours), now_ms)
        return IngestResult(accepted, rejected, errors, new=stored)

    def ingest_control_plane(self, detail: object, now: datetime,
                             tenant_exists: Callable[[str], bool]) -> dict[str, Any]:
        """A control-plane batch `{"tenant": T, "items": [...]}` (the detail of its event).

        Its producer is trusted to name the tenant (the caller's transport is the trust boundary:
        for ControlPlaneBus, the bus's resource policy), so the tenant named is taken as stated
        (and must exist). Only a fully valid batch may raise (and so be retried by the transport
        and end in its DLQ): every content check runs before anything that can fail transiently,
        a malformed batch is dropped and counted, and a batch with any invalid item is never
        retried (its valid items are stored if the store is up, else it is dropped and counted)."""
        from infercrane.domain.capacity.intake import batch_of, validate_attempt

        drop: dict[str, Any] = {"accepted": 0, "rejected": 0, "dropped": 1}
        try:
            stated: Mapping[str, Any] = detail if isinstance(detail, Mapping) else {}
            tenant = stated.get("tenant")
            if not isinstance(tenant, str) or not TENANT_RE.match(tenant):
                return {**drop, "reason": "unknown_tenant"}
            items = batch_of({k: v for k, v in stated.items() if k != "tenant"})
            now_ms = epoch_ms(now)
            clean = all(not isinstance(validate_attempt(tenant, i, raw, now_ms, self.classify,
                                                        self.version), list)
                        for i, raw in enumerate(items))
        except (InvalidInput, PayloadTooLarge) as exc:
            return {**drop, "reason": exc.code, "field": exc.field}
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("lifecycle event dropped unread: %s", type(exc).__name__)
            return {**drop, "reason": "unreadable"}
        try:
            if not tenant_exists(tenant):
                return {**drop, "reason": "unknown_tenant"}
            result = self.ingest(tenant, items, now)
        except DependencyUnavailable:
            if clean:
                raise
            log.warning("lifecycle event with invalid items dropped: the store is unavailable")
            return {**drop, "reason": "dependency_unavailable"}
        doc = result.to_document()
        return {"accepted": doc["accepted"], "rejected": doc["rejected"], "dropped": 0,
                "errors": [{k: e[k] for k in ("index", "field", "code")} for e in doc["errors"]]}

    # -- aggregate ------------------------------------------------------------------------------
    def aggregate(self, now: datetime, max_hours: int = 5000,
                  time_left_ms: Callable[[], int] | None = None) -> AggregateResult:
        """One aggregator run (`Aggregator.run`) with this service's store and classifier."""
        return self._aggregator().run(now, max_hours, time_left_ms)

    def _aggregator(self) -> Aggregator:
        from infercrane.domain.capacity.aggregate import Aggregator

        return Aggregator(self.store, self.classify, self.version, self.previous_versions,
                          self.settle_ms)

    def _recompute(self, tenant: str, hour: int) -> tuple[HourRollup, list[StoredAttempt]]:
        from infercrane.domain.capacity.rollups import rebuild_hour

        return rebuild_hour(self.store, tenant, hour, self.classify, self.version)

    # -- report ---------------------------------------------------------------------------------
    def report(self, tenant: str, window: str, until: datetime | None, group_by: str | None,
               now: datetime) -> dict[str, Any]:
        from infercrane.domain.capacity.report import build_report

        return build_report(self.store, self.version, self._recompute, tenant, window, until,
                            group_by, now)
