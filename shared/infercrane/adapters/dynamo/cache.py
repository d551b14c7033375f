"""DynamoDB adapter for the CacheTable: observations, their audit trail, prefetch requests and the
sparse `sweep` index.

Layouts (every key begins with the tenant):
  <tenant>#CACHE#<digest>      / OBS#<adapter>#<location>                      current observation
  <tenant>#CACHE#<digest>      / AUDIT#<adapter>#<location>#<ms:013d>#<rand>   audit trail
  <tenant>#PREFETCH#<key hash> / ATTEMPT#<attempt:06d>                         a prefetch attempt

The `sweep` index (`sweep_pk`, `sweep_sk`) is sparse: only items that need attention at a due time
carry its attributes. `sweep_pk` is `<kind>#<shard>` (kind `obs` or `pf`, a few shards so no one
partition is hot) and `sweep_sk` is `<due, RFC 3339>#<pk>#<sk>`, so "what is due now" is one Query
per shard. Handling an item removes (or moves) its index attributes with a write conditional on
`sweep_sk` being unchanged. The `ttl` attribute lets DynamoDB reclaim space long after expiry;
nothing depends on it for correctness.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from pynamodb.attributes import (
    MapAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    UTCDateTimeAttribute,
)
from pynamodb.exceptions import PynamoDBException
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind, write_error
from infercrane.clock import rfc3339
from infercrane.domain.cache import CacheObservation
from infercrane.domain.prefetch import PrefetchRequest, RequestRef
from infercrane.errors import DependencyUnavailable
from infercrane.ports.cache import SweepEntry

log = logging.getLogger(__name__)

SHARDS = 4
OBSERVATION_RETAIN = timedelta(days=7)  # after expiry, before TTL may reclaim the item
AUDIT_RETAIN = timedelta(days=30)
REQUEST_RETAIN = timedelta(days=90)


class SweepIndex(GlobalSecondaryIndex["CacheItem"]):
    class Meta:
        index_name = "sweep"
        projection = AllProjection()

    sweep_pk = UnicodeAttribute(hash_key=True)
    sweep_sk = UnicodeAttribute(range_key=True)


class CacheItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute()  # obs | audit | pf
    tenant = UnicodeAttribute()
    model = UnicodeAttribute()
    adapter = UnicodeAttribute()
    location = UnicodeAttribute()
    sweep_pk = UnicodeAttribute(null=True)
    sweep_sk = UnicodeAttribute(null=True)
    sweep = SweepIndex()
    ttl = TTLAttribute(null=True)
    # observations and audit entries
    state = UnicodeAttribute(null=True)
    previous_state = UnicodeAttribute(null=True)
    event = UnicodeAttribute(null=True)
    evidence: MapAttribute[str, Any] = MapAttribute(null=True)
    observed_at = UTCDateTimeAttribute(null=True)
    expires_at = UTCDateTimeAttribute(null=True)
    recorded_at = UTCDateTimeAttribute(null=True)
    # prefetch requests
    request_id = UnicodeAttribute(null=True)
    source = UnicodeAttribute(null=True)
    status = UnicodeAttribute(null=True)
    attempt = NumberAttribute(null=True)
    failure_reason = UnicodeAttribute(null=True)
    resources: MapAttribute[str, Any] = MapAttribute(null=True)
    created_at = UTCDateTimeAttribute(null=True)
    updated_at = UTCDateTimeAttribute(null=True)
    dispatched_at = UTCDateTimeAttribute(null=True)
    dispatch_count = NumberAttribute(null=True)
    release_requested_at = UTCDateTimeAttribute(null=True)
    redispatch_count = NumberAttribute(null=True)


def _conditional_failed(exc: PynamoDBException) -> bool:
    return exc.cause_response_code in ("ConditionalCheckFailedException",
                                       "TransactionConditionalCheckFailed")


def _map(attr: Any) -> dict[str, str]:
    if attr is None:
        return {}
    raw = attr.as_dict() if hasattr(attr, "as_dict") else dict(attr)
    return {str(k): str(v) for k, v in raw.items()}


def _shard(pk: str) -> int:
    return int(hashlib.sha256(pk.encode()).hexdigest()[:8], 16) % SHARDS


def _sweep_keys(kind: str, pk: str, sk: str, due: datetime) -> tuple[str, str]:
    return f"{kind}#{_shard(pk)}", f"{rfc3339(due)}#{pk}#{sk}"


def _parse_due(token: str) -> datetime:
    return datetime.strptime(token.split("#", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


class DynamoCacheStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(CacheItem, table_name, config)

    # -- keys --------------------------------------------------------------------------------
    @staticmethod
    def _obs_pk(tenant: str, model: str) -> str:
        return f"{tenant}#CACHE#{model}"

    @staticmethod
    def _req_pk(tenant: str, key_hash: str) -> str:
        return f"{tenant}#PREFETCH#{key_hash}"

    @staticmethod
    def _req_sk(attempt: int) -> str:
        return f"ATTEMPT#{attempt:06d}"

    # -- observations ----------------------------------------------------------------------
    def _to_obs(self, item: Any) -> CacheObservation:
        return CacheObservation(
            tenant=item.tenant, model=item.model, adapter=item.adapter, location=item.location,
            state=item.state or "unknown", evidence=_map(item.evidence),
            observed_at=item.observed_at, expires_at=item.expires_at,
            recorded_at=item.recorded_at, previous_state=item.previous_state)

    def put_observation(self, obs: CacheObservation, *, sweep_due: datetime | None) -> bool:
        pk = self._obs_pk(obs.tenant, obs.model)
        sk = f"OBS#{obs.adapter}#{obs.location}"
        sweep_pk, sweep_sk = _sweep_keys("obs", pk, sk, sweep_due) if sweep_due else (None, None)
        item = self._item(pk, sk, kind="obs", tenant=obs.tenant, model=obs.model,
                          adapter=obs.adapter, location=obs.location, state=obs.state,
                          evidence=dict(obs.evidence), observed_at=obs.observed_at,
                          expires_at=obs.expires_at, recorded_at=obs.recorded_at,
                          sweep_pk=sweep_pk, sweep_sk=sweep_sk,
                          ttl=obs.expires_at + OBSERVATION_RETAIN)
        # Deliveries arrive out of order: an older observation never replaces a newer one.
        condition = self._item.pk.does_not_exist() | (self._item.observed_at <= obs.observed_at)
        try:
            item.save(condition=condition)
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return False
            raise write_error(exc, "The cache table is unavailable.") from exc
        return True

    def list_observations(self, tenant: str, model: str, adapter: str | None,
                          location: str | None) -> list[CacheObservation]:
        pk = self._obs_pk(tenant, model)
        prefix = f"OBS#{adapter}#" if adapter else "OBS#"
        try:
            items = list(self._item.query(pk, self._item.sk.startswith(prefix),
                                          consistent_read=True))
        except PynamoDBException as exc:
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        found = [self._to_obs(i) for i in items]
        if location is not None:
            # Exact match: one location may be a prefix of another ("c/ns" and "c/ns-2").
            found = [o for o in found if o.location == location]
        return found

    def append_audit(self, obs: CacheObservation, event: str, at: datetime) -> None:
        ms = int(at.timestamp() * 1000)
        sk = f"AUDIT#{obs.adapter}#{obs.location}#{ms:013d}#{secrets.token_hex(4)}"
        item = self._item(self._obs_pk(obs.tenant, obs.model), sk, kind="audit",
                          tenant=obs.tenant, model=obs.model, adapter=obs.adapter,
                          location=obs.location, event=event, state=obs.state,
                          previous_state=obs.previous_state, evidence=dict(obs.evidence),
                          observed_at=obs.observed_at, expires_at=obs.expires_at,
                          recorded_at=at, ttl=at + AUDIT_RETAIN)
        try:
            item.save()
        except PynamoDBException as exc:
            raise write_error(exc, "The cache table is unavailable.") from exc

    def audit(self, tenant: str, model: str) -> list[dict[str, Any]]:
        """The audit trail of a model's observations (operators and tests)."""
        try:
            items = list(self._item.query(self._obs_pk(tenant, model),
                                          self._item.sk.startswith("AUDIT#"), consistent_read=True))
        except PynamoDBException as exc:
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return [{"event": i.event, "adapter": i.adapter, "location": i.location, "state": i.state,
                 "previous_state": i.previous_state, "recorded_at": rfc3339(i.recorded_at)}
                for i in items]

    # -- the sweep index ---------------------------------------------------------------------
    def due(self, kind: str, now: datetime, limit: int) -> list[SweepEntry]:
        # '$' sorts right after '#': every entry due at or before `now` is below this bound.
        bound = f"{rfc3339(now)}$"
        out: list[SweepEntry] = []
        try:
            for shard in range(SHARDS):
                for item in self._item.sweep.query(f"{kind}#{shard}",
                                                   self._item.sweep_sk < bound,
                                                   limit=max(0, limit - len(out))):
                    if item.sweep_sk is None:
                        continue
                    try:
                        due = _parse_due(item.sweep_sk)
                    except ValueError:
                        # One tenant's unreadable entry (e.g. dated year 1) never stops the
                        # sweep for the others: skipped and logged by key, never by content.
                        log.warning("sweep: unreadable %s entry %s/%s skipped", kind, item.pk,
                                    item.sk)
                        continue
                    out.append(SweepEntry(kind, item.pk, item.sk, item.sweep_sk, due,
                                          item.tenant, item.request_id or ""))
                if len(out) >= limit:
                    break
        except PynamoDBException as exc:
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return out

    def expire_observation(self, entry: SweepEntry, now: datetime) -> CacheObservation | None:
        item = self._item(entry.pk, entry.sk)
        try:
            item.update(actions=[self._item.previous_state.set(self._item.state),
                                 self._item.state.set("unknown"),
                                 self._item.sweep_pk.remove(), self._item.sweep_sk.remove()],
                        condition=self._item.sweep_sk == entry.token)
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return None
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return self._to_obs(item)

    def postpone(self, entry: SweepEntry, due: datetime, *, count_redispatch: bool = False) -> bool:
        sweep_pk, sweep_sk = _sweep_keys(entry.kind, entry.pk, entry.sk, due)
        actions: list[Any] = [self._item.sweep_pk.set(sweep_pk), self._item.sweep_sk.set(sweep_sk)]
        if count_redispatch:
            actions.append(self._item.redispatch_count.add(1))
        try:
            self._item(entry.pk, entry.sk).update(
                actions=actions,
                condition=self._item.sweep_sk == entry.token)
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return False
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return True

    # -- prefetch requests -----------------------------------------------------------------
    def _to_request(self, item: Any) -> PrefetchRequest:
        return PrefetchRequest(
            id=item.request_id, tenant=item.tenant, model=item.model, adapter=item.adapter,
            location=item.location, source=item.source or "", status=item.status or "accepted",
            attempt=int(item.attempt or 1), failure_reason=item.failure_reason,
            resources=_map(item.resources), created_at=item.created_at,
            updated_at=item.updated_at, dispatched_at=item.dispatched_at,
            dispatch_count=int(item.dispatch_count or 0),
            release_requested_at=item.release_requested_at,
            redispatches=int(item.redispatch_count or 0))

    def latest_request(self, tenant: str, key_hash: str) -> PrefetchRequest | None:
        try:
            for item in self._item.query(self._req_pk(tenant, key_hash),
                                         self._item.sk.startswith("ATTEMPT#"),
                                         scan_index_forward=False, limit=1, consistent_read=True):
                return self._to_request(item)
        except PynamoDBException as exc:
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return None

    def get_request(self, ref: RequestRef) -> PrefetchRequest | None:
        try:
            item = self._item.get(self._req_pk(ref.tenant, ref.key_hash),
                                  self._req_sk(ref.attempt), consistent_read=True)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return self._to_request(item)

    def create_request(self, request: PrefetchRequest, key_hash: str,
                       sweep_due: datetime) -> bool:
        pk, sk = self._req_pk(request.tenant, key_hash), self._req_sk(request.attempt)
        sweep_pk, sweep_sk = _sweep_keys("pf", pk, sk, sweep_due)
        item = self._item(pk, sk, kind="pf", tenant=request.tenant, model=request.model,
                          adapter=request.adapter, location=request.location,
                          request_id=request.id, source=request.source, status=request.status,
                          attempt=request.attempt, resources={}, created_at=request.created_at,
                          updated_at=request.updated_at, dispatch_count=0,
                          sweep_pk=sweep_pk, sweep_sk=sweep_sk,
                          ttl=request.created_at + REQUEST_RETAIN)
        try:
            item.save(condition=self._item.pk.does_not_exist())
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return False
            raise write_error(exc, "The cache table is unavailable.") from exc
        return True

    def update_status(self, ref: RequestRef, from_statuses: tuple[str, ...], to_status: str,
                      now: datetime, *, reason: str | None, sweep_due: datetime | None,
                      dispatched: bool) -> PrefetchRequest | None:
        pk, sk = self._req_pk(ref.tenant, ref.key_hash), self._req_sk(ref.attempt)
        actions: list[Any] = [self._item.status.set(to_status), self._item.updated_at.set(now)]
        if reason is not None:
            actions.append(self._item.failure_reason.set(reason))
        if dispatched:
            actions += [self._item.dispatched_at.set(now), self._item.dispatch_count.add(1)]
        if sweep_due is not None:
            sweep_pk, sweep_sk = _sweep_keys("pf", pk, sk, sweep_due)
            actions += [self._item.sweep_pk.set(sweep_pk), self._item.sweep_sk.set(sweep_sk)]
        else:
            actions += [self._item.sweep_pk.remove(), self._item.sweep_sk.remove()]
        item = self._item(pk, sk)
        try:
            item.update(actions=actions, condition=self._item.pk.exists()
                        & self._item.status.is_in(*from_statuses))
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return None
            raise write_error(exc, "The cache table is unavailable.") from exc
        return self._to_request(item)

    def note_dispatch(self, ref: RequestRef, now: datetime) -> PrefetchRequest | None:
        item = self._item(self._req_pk(ref.tenant, ref.key_hash), self._req_sk(ref.attempt))
        try:
            item.update(actions=[self._item.dispatched_at.set(now),
                                 self._item.dispatch_count.add(1)],
                        condition=self._item.pk.exists())
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return None
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return self._to_request(item)

    def set_resource(self, ref: RequestRef, key: str, value: str, now: datetime) -> str | None:
        pk, sk = self._req_pk(ref.tenant, ref.key_hash), self._req_sk(ref.attempt)
        slot = self._item.resources[key]
        try:
            self._item(pk, sk).update(
                actions=[slot.set(value), self._item.updated_at.set(now)],
                condition=self._item.pk.exists() & slot.does_not_exist())
        except PynamoDBException as exc:
            if not _conditional_failed(exc):
                raise write_error(exc, "The cache table is unavailable.") from exc
            current = self.get_request(ref)
            return None if current is None else current.resources.get(key)
        return value

    def mark_release(self, ref: RequestRef, now: datetime) -> PrefetchRequest | None:
        item = self._item(self._req_pk(ref.tenant, ref.key_hash), self._req_sk(ref.attempt))
        try:
            item.update(actions=[self._item.release_requested_at.set(now),
                                 self._item.updated_at.set(now)],
                        condition=self._item.pk.exists())
        except PynamoDBException as exc:
            if _conditional_failed(exc):
                return None
            raise DependencyUnavailable("The cache table is unavailable.") from exc
        return self._to_request(item)
