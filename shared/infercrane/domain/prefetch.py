"""Durable, idempotent prefetch requests. Execution belongs to the selected infrastructure adapter:
this service persists a request, hands it to the adapter's transport and records what the adapter
reports. It never downloads anything itself.

Idempotency rests on conditional writes keyed on `tenant|digest|adapter|location`:
- every attempt of one key lives in one partition (`<tenant>#PREFETCH#<key hash>`), one item per
  attempt; a new attempt is a conditional put of the next attempt number, so of any number of
  concurrent identical requests exactly one creates it and the others answer that same request;
- while an attempt is active (not `completed`/`failed`) the same key answers the same request
  (200), or `idempotency_conflict` when the payload (its `source`) differs;
- once it has ended, a new request for the key starts the next attempt.

A request is persisted *before* anything is sent; a crash between persisting and enqueueing (or
between dispatching and marking) loses nothing: requests sit in the sparse sweep index until they
end, and the sweeper re-sends the overdue ones. Adapters are idempotent, so a re-send never
duplicates provider work.

Every request ends. An adapter that holds a request `in_progress` renews its deadline each time it
reports `in_progress` (its re-checks do); one that goes silent in `accepted`, `dispatched` or
`in_progress` is re-dispatched by the sweeper with a doubling back-off at most `MAX_REDISPATCHES`
times, and the next time it is overdue it ends `failed` with reason `adapter_unresponsive`. It
then leaves the sweep index, so nothing re-sends it for the rest of its retention.

Readiness is never answered here: a request's status says what the adapter did, the effective
cache state (`infercrane.domain.cache`) says what is there.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from infercrane.clock import rfc3339, utcnow
from infercrane.domain.cache import validate_adapter, validate_location
from infercrane.domain.model_identity import validate_digest
from infercrane.domain.validation import (
    BODY_FIELD_SENTENCE,
    BODY_FIELDS,
    UNSTORABLE_SENTENCE,
    unstorable,
)
from infercrane.errors import Conflict, DependencyUnavailable, IdempotencyConflict, InvalidInput, NotFound

if TYPE_CHECKING:
    from infercrane.ports.cache import CacheStore
    from infercrane.ports.transport import MessageTransport

log = logging.getLogger(__name__)

SCHEMA = "infercrane.prefetch/v1"
STATUSES = ("accepted", "dispatched", "in_progress", "completed", "failed")
ENDED = ("completed", "failed")
# Allowed moves. `dispatched -> dispatched` is a re-send. The contract's flow is
# accepted -> dispatched -> in_progress -> completed | failed; the extra edges exist because an
# adapter may pick a message up before the dispatcher has marked it dispatched, and may finish
# (or refuse) without an in-progress phase. `in_progress -> in_progress` is the adapter's
# heartbeat: it renews the request's deadline.
ALLOWED: dict[str, tuple[str, ...]] = {
    "accepted": ("dispatched", "in_progress", "completed", "failed"),
    "dispatched": ("dispatched", "in_progress", "completed", "failed"),
    "in_progress": ("in_progress", "completed", "failed"),
    "completed": (),
    "failed": (),
}
ACCEPTED_DEADLINE_S = 120  # accepted but not dispatched by then: the sweeper re-sends
DISPATCHED_DEADLINE_S = 900  # dispatched but not picked up by the adapter by then: re-send
# in_progress without a heartbeat for this long: re-send. Longer than the adapter runner's longest
# re-check delay (900 s, RunnerPolicy) with room for queue latency.
IN_PROGRESS_DEADLINE_S = 3600
# Sweeper re-sends of one request before it ends `failed` with ADAPTER_UNRESPONSIVE. With the
# doubling back-off (1800, 3600, 7200, 14400 s after the first 900 s) a silent adapter is given
# up on about eight hours after dispatch.
MAX_REDISPATCHES = 4
ADAPTER_UNRESPONSIVE = "adapter_unresponsive"
ACTIVE = ("accepted", "dispatched", "in_progress")
MAX_SOURCE_LEN = 2048
MAX_RESOURCE_VALUE_LEN = 8192

_ID_RE = re.compile(r"^pf_([0-9a-f]{32})_([1-9][0-9]{0,5})$")
_SOURCE_RE = re.compile(r"^[^\s\x00-\x1f\x7f]+$")
_RESOURCE_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


def key_hash(tenant: str, model: str, adapter: str, location: str) -> str:
    return hashlib.sha256(f"{tenant}|{model}|{adapter}|{location}".encode()).hexdigest()[:32]


def request_id(key: str, attempt: int) -> str:
    return f"pf_{key}_{attempt}"


@dataclass(frozen=True)
class RequestRef:
    """Where a request lives: derived from its id and the caller's tenant (so another tenant's
    id simply finds nothing)."""

    tenant: str
    key_hash: str
    attempt: int

    @property
    def id(self) -> str:
        return request_id(self.key_hash, self.attempt)


def parse_request_id(tenant: str, value: str) -> RequestRef:
    m = _ID_RE.match(value or "")
    if not m:
        raise NotFound("No such prefetch request.", field="id")
    return RequestRef(tenant, m.group(1), int(m.group(2)))


def normalize_reason(reason: str | None) -> str:
    """A failure reason as a short snake_case code (`snapshot_not_encrypted`)."""
    text = re.sub(r"[^a-z0-9]+", "_", (reason or "").lower()).strip("_")[:64].rstrip("_")
    if not text or not text[0].isalpha():
        text = f"reason_{text}" if text else "unspecified"
    return text[:64]


def validate_source(value: object, *, field: str = "source") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput("A source reference is required (a snapshot id, image or URI).",
                           field=field)
    if len(value) > MAX_SOURCE_LEN or not _SOURCE_RE.match(value) or unstorable(value):
        raise InvalidInput("The source is at most 2048 characters without spaces or control "
                           "characters.", field=field)
    return value


@dataclass(frozen=True)
class PrefetchRequest:
    id: str
    tenant: str
    model: str
    adapter: str
    location: str
    source: str
    status: str
    attempt: int
    failure_reason: str | None
    resources: dict[str, str]
    created_at: datetime
    updated_at: datetime
    dispatched_at: datetime | None = None
    dispatch_count: int = 0
    release_requested_at: datetime | None = None
    redispatches: int = 0  # sweeper re-sends so far (at most MAX_REDISPATCHES)

    @property
    def ref(self) -> RequestRef:
        return parse_request_id(self.tenant, self.id)

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "adapter": self.adapter,
            "location": self.location,
            "source": self.source,
            "status": self.status,
            "attempt": self.attempt,
            "failure_reason": self.failure_reason,
            "resources": dict(self.resources),
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "dispatched_at": rfc3339(self.dispatched_at) if self.dispatched_at else None,
            "dispatch_count": self.dispatch_count,
            "redispatches": self.redispatches,
            "release_requested_at": (rfc3339(self.release_requested_at)
                                     if self.release_requested_at else None),
            # Readiness is the effective cache state, never this request's status.
            "cache": f"/v1/cache/{self.model}",
        }


def adapter_message(req: PrefetchRequest, action: str) -> dict[str, Any]:
    """The JSON body an adapter's queue receives (schema `infercrane.prefetch/v1`)."""
    return {"schema": SCHEMA, "action": action, "tenant": req.tenant, "request_id": req.id,
            "model": req.model, "adapter": req.adapter, "location": req.location,
            "source": req.source, "attempt": req.attempt}


class PrefetchService:
    def __init__(self, store: CacheStore, dispatch_queue: MessageTransport,
                 adapter_transports: dict[str, MessageTransport], clock: Any = utcnow, *,
                 accepted_deadline_s: int = ACCEPTED_DEADLINE_S,
                 dispatched_deadline_s: int = DISPATCHED_DEADLINE_S,
                 in_progress_deadline_s: int = IN_PROGRESS_DEADLINE_S,
                 max_redispatches: int = MAX_REDISPATCHES):
        self._store = store
        self._queue = dispatch_queue
        self._transports = adapter_transports
        self._clock = clock
        self._accepted_deadline = timedelta(seconds=accepted_deadline_s)
        self._dispatched_deadline = timedelta(seconds=dispatched_deadline_s)
        self._in_progress_deadline = timedelta(seconds=in_progress_deadline_s)
        self._max_redispatches = max_redispatches

    # -- the API side ---------------------------------------------------------------------
    def request(self, tenant: str, model: str, adapter: str, location: str,
                source: str) -> tuple[PrefetchRequest, bool]:
        """(request, created). Validates everything before anything is stored or sent."""
        validate_digest(model)
        validate_adapter(adapter)
        validate_location(adapter, location)
        validate_source(source)
        key = key_hash(tenant, model, adapter, location)
        for _ in range(8):
            latest = self._store.latest_request(tenant, key)
            if latest is not None and not latest.ended:
                if latest.source != source:
                    raise IdempotencyConflict(
                        "An active prefetch request for this model, adapter and location has a "
                        "different source.", field="source")
                return latest, False
            attempt = latest.attempt + 1 if latest is not None else 1
            now = self._clock()
            new = PrefetchRequest(request_id(key, attempt), tenant, model, adapter, location,
                                  source, "accepted", attempt, None, {}, now, now)
            if self._store.create_request(new, key, now + self._accepted_deadline):
                self._enqueue(new)
                return new, True
            # Another caller created this attempt first: answer theirs on the next pass.
        raise DependencyUnavailable("The prefetch request could not be settled; retry.")

    def get(self, tenant: str, request_id: str) -> PrefetchRequest:
        found = self._store.get_request(parse_request_id(tenant, request_id))
        if found is None:
            raise NotFound("No such prefetch request.", field="id")
        return found

    def request_release(self, tenant: str, request_id: str) -> PrefetchRequest:
        """Ask the adapter to release what it provisioned for this request (idempotent there)."""
        req = self.get(tenant, request_id)
        self._transport(req.adapter).send(adapter_message(req, "release"))
        marked = self._store.mark_release(req.ref, self._clock())
        return marked or req

    # -- the dispatcher and the sweeper -----------------------------------------------------
    def _enqueue(self, req: PrefetchRequest) -> None:
        try:
            self._queue.send({"tenant": req.tenant, "request_id": req.id})
        except DependencyUnavailable:
            # Persisted already: the sweeper re-sends it once it is overdue.
            log.warning("prefetch enqueue failed; the sweeper will re-send",
                        extra={"request_id": req.id})

    def dispatch(self, tenant: str, request_id: str) -> tuple[PrefetchRequest, bool]:
        """Send a persisted request to its adapter's transport, then mark it dispatched.
        (request, sent). A duplicate message for a freshly dispatched request sends nothing."""
        req = self.get(tenant, request_id)
        now = self._clock()
        # The sweeper re-enqueues a silent `dispatched` or `in_progress` request; a duplicate
        # queue message soon after a send is still absorbed here.
        overdue = (req.status in ("dispatched", "in_progress")
                   and (req.dispatched_at is None
                        or now - req.dispatched_at >= self._dispatched_deadline))
        if req.status != "accepted" and not overdue:
            return req, False
        self._transport(req.adapter).send(adapter_message(req, "prefetch"))
        # Sent first, marked second: a crash in between leaves it `accepted`, and the sweeper's
        # re-send is absorbed by the adapter's idempotency.
        updated = self._store.update_status(req.ref, ("accepted", "dispatched"), "dispatched", now,
                                            reason=None,
                                            sweep_due=self._resend_due(now, req.redispatches),
                                            dispatched=True)
        if updated is None:
            # The adapter moved it on before we marked it: keep the send on record anyway.
            updated = self._store.note_dispatch(req.ref, now)
        return (updated or self.get(tenant, request_id)), True

    def _resend_due(self, now: datetime, redispatches: int) -> datetime:
        """When a request sent `redispatches` times by the sweeper is overdue: doubling."""
        return now + self._dispatched_deadline * 2 ** redispatches

    def redispatch_stuck(self, now: datetime, limit: int = 1000) -> tuple[int, int, int]:
        """Re-enqueue requests overdue in `accepted`/`dispatched`/`in_progress`, each at most
        `max_redispatches` times; end the ones overdue after that `failed`
        (`adapter_unresponsive`). (re-sent, skipped, failed)."""
        sent = skipped = failed = 0
        for entry in self._store.due("pf", now, limit):
            req = self._store.get_request(parse_request_id(entry.tenant, entry.item_id))
            if req is None or req.ended:
                skipped += 1  # ending a request removes it from the index: a stale read
                continue
            give_up = req.redispatches >= self._max_redispatches
            # Claim first (move its due time on, counting the re-send); a concurrent sweep or a
            # heartbeat that moved it meanwhile makes the claim fail.
            due = self._resend_due(now, req.redispatches + 1)
            if not self._store.postpone(entry, due, count_redispatch=not give_up):
                skipped += 1
                continue
            if give_up:
                ended = self._store.update_status(req.ref, ACTIVE, "failed", now,
                                                  reason=ADAPTER_UNRESPONSIVE, sweep_due=None,
                                                  dispatched=False)
                if ended is None:
                    skipped += 1  # it ended by itself meanwhile
                else:
                    failed += 1
                    log.warning("prefetch request gave up: adapter unresponsive",
                                extra={"request_id": req.id, "redispatches": req.redispatches})
                continue
            try:
                self._queue.send({"tenant": entry.tenant, "request_id": entry.item_id})
            except DependencyUnavailable:
                skipped += 1  # still in the index: the next sweep tries again
                continue
            sent += 1
        return sent, skipped, failed

    # -- the adapter side ---------------------------------------------------------------------
    def transition(self, tenant: str, request_id: str, to_status: str, *,
                   reason: str | None = None) -> PrefetchRequest:
        if to_status not in STATUSES:
            raise InvalidInput("Unknown prefetch status.", field="status")
        req = self.get(tenant, request_id)
        if req.status == to_status and to_status not in ("dispatched", "in_progress"):
            return req
        sources = tuple(s for s, targets in ALLOWED.items() if to_status in targets)
        if req.status not in sources:
            raise Conflict("That status change is not allowed from the request's current status.",
                           field="status")
        now = self._clock()
        due = {"dispatched": now + self._dispatched_deadline,
               "in_progress": now + self._in_progress_deadline}.get(to_status)
        updated = self._store.update_status(
            req.ref, sources, to_status, now,
            reason=normalize_reason(reason) if to_status == "failed" else None,
            sweep_due=due, dispatched=to_status == "dispatched")
        if updated is not None:
            return updated
        current = self.get(tenant, request_id)
        if current.status == to_status:
            return current
        raise Conflict("That status change is not allowed from the request's current status.",
                       field="status")

    def record_resource(self, tenant: str, request_id: str, key: str, value: str) -> str:
        """Record a provisioned resource once; returns what is stored (the first writer wins)."""
        if key in BODY_FIELDS:  # the value under a body-like name would be a body, stored
            raise InvalidInput(BODY_FIELD_SENTENCE, field="key", code="body_field_refused")
        if not isinstance(key, str) or not _RESOURCE_KEY.match(key):
            raise InvalidInput("Resource keys are up to 64 lowercase letters, digits, '_', '.' "
                               "or '-'.", field="key")
        if not isinstance(value, str) or not value or len(value) > MAX_RESOURCE_VALUE_LEN:
            raise InvalidInput("Resource values are 1-8192 characters.", field="value")
        if unstorable(value):
            raise InvalidInput(UNSTORABLE_SENTENCE, field="value")
        ref = parse_request_id(tenant, request_id)
        stored = self._store.set_resource(ref, key, value, self._clock())
        if stored is None:
            raise NotFound("No such prefetch request.", field="id")
        return stored

    def _transport(self, adapter: str) -> MessageTransport:
        try:
            return self._transports[adapter]
        except KeyError:
            raise DependencyUnavailable("No transport is configured for that adapter.") from None
