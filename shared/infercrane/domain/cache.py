"""The artifact-cache contract: short-lived, provider-native observations of whether a model
artifact is `present`, `prefetching`, `missing` or `unknown` where it will run.

Observations are facts with an expiry, never promises. Expiry is at most 24 hours after
`observed_at` (longer asks are clamped; an earlier provider bound wins). Reads compute the
*effective* state: an expired observation, or one without evidence, reads `unknown` whatever was
stored, so nothing stale or unproven is ever reported as a hit. The scheduled sweep marks expired
observations `unknown` in storage too (with an audit entry), but reads never rely on it, and
DynamoDB TTL only reclaims space.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from infercrane.clock import rfc3339, utcnow
from infercrane.domain.model_identity import validate_digest
from infercrane.domain.validation import (
    UNSTORABLE_SENTENCE,
    check_time,
    refuse_body_keys,
    unstorable,
)
from infercrane.errors import InvalidInput

if TYPE_CHECKING:
    from infercrane.domain.prefetch import PrefetchService
    from infercrane.ports.cache import CacheStore

log = logging.getLogger(__name__)

ADAPTERS = ("aws", "gcp", "kubernetes")
STATES = ("present", "prefetching", "missing", "unknown")
MAX_TTL_S = 24 * 3600
# Adapters re-verify often; an observation that is not renewed should fade to `unknown` soon.
DEFAULT_TTL_S = 3600
MAX_FUTURE_S = 300
MAX_EVIDENCE_KEYS = 32
MAX_EVIDENCE_KEY_LEN = 64
MAX_EVIDENCE_VALUE_LEN = 4096

# us-east-1a, eu-central-1b, us-gov-west-1a, Local Zones such as us-west-2-lax-1a.
_AWS_AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}(-[a-z]+-\d{1,2})?[a-z]$")
# us-central1-a, europe-west4-b, northamerica-northeast1-c.
_GCP_ZONE = re.compile(r"^[a-z]+-[a-z]+\d{1,2}-[a-z]$")
# cluster/namespace: a cluster name (letters, digits, '-', '_', '.') and a DNS-1123 namespace.
_K8S = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_EVIDENCE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")

_LOCATION_HELP = {
    "aws": "For the aws adapter, location is an availability zone such as us-east-1a.",
    "gcp": "For the gcp adapter, location is a zone such as us-central1-a.",
    "kubernetes": "For the kubernetes adapter, location is 'cluster/namespace'.",
}


def validate_adapter(value: object, *, field: str = "adapter") -> str:
    if not isinstance(value, str) or value not in ADAPTERS:
        raise InvalidInput("The adapter must be one of aws, gcp or kubernetes.", field=field)
    return value


def validate_location(adapter: str, value: object, *, field: str = "location") -> str:
    pattern = {"aws": _AWS_AZ, "gcp": _GCP_ZONE, "kubernetes": _K8S}[adapter]
    if not isinstance(value, str) or len(value) > 200 or not pattern.match(value):
        raise InvalidInput(_LOCATION_HELP[adapter], field=field)
    return value


def validate_state(value: object, *, field: str = "state") -> str:
    if not isinstance(value, str) or value not in STATES:
        raise InvalidInput("The state must be one of present, prefetching, missing or unknown.",
                           field=field)
    return value


def validate_evidence(value: object, *, field: str = "evidence") -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidInput("Evidence must be an object of string values.", field=field)
    if len(value) > MAX_EVIDENCE_KEYS:
        raise InvalidInput("Evidence has too many entries (at most 32).", field=field)
    refuse_body_keys(value)  # whoever reports it: the HTTP route and the in-AWS adapters alike
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or len(k) > MAX_EVIDENCE_KEY_LEN or not _EVIDENCE_KEY.match(k):
            raise InvalidInput("Evidence keys are up to 64 letters, digits, '_', '.' or '-', "
                               "starting with a letter.", field=field)
        if not isinstance(v, str) or len(v) > MAX_EVIDENCE_VALUE_LEN:
            raise InvalidInput("Evidence values are strings of at most 4096 characters.",
                               field=f"{field}.{k}")
        if unstorable(v):
            raise InvalidInput(UNSTORABLE_SENTENCE, field=f"{field}.{k}")
        out[k] = v
    return out


def _aware_input(value: object, field: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInput("Must be an RFC 3339 timestamp with a timezone.", field=field)
    return value


def _aware(value: object, field: str) -> datetime:
    # Bounded like every time field; a provider's `not_after` may lie far ahead.
    return check_time(_aware_input(value, field), field, future=timedelta(days=3660))


def expiry(observed_at: datetime, ttl_seconds: int | None,
           not_after: datetime | None = None) -> datetime:
    """When an observation stops counting: at most 24 h after it was made, never after a
    provider's own bound (`not_after`)."""
    ttl = DEFAULT_TTL_S if ttl_seconds is None else min(ttl_seconds, MAX_TTL_S)
    expires = observed_at + timedelta(seconds=ttl)
    if not_after is not None and not_after < expires:
        expires = not_after
    return expires


@dataclass(frozen=True)
class CacheObservation:
    tenant: str
    model: str
    adapter: str
    location: str
    state: str  # as reported (or `unknown` once the sweep has expired it)
    evidence: dict[str, str]
    observed_at: datetime
    expires_at: datetime
    recorded_at: datetime
    previous_state: str | None = None  # what the sweep replaced with `unknown`
    applied: bool = True  # False when a newer observation was already stored

    def effective(self, now: datetime) -> EffectiveObservation:
        state = self.state
        reason = None
        if now >= self.expires_at:
            state, reason = "unknown", "expired"
        elif not self.evidence:
            state, reason = "unknown", "no_evidence"
        elif self.state == "unknown":
            reason = "reported_unknown" if self.previous_state is None else "expired"
        return EffectiveObservation(self, state, reason, now)


@dataclass(frozen=True)
class EffectiveObservation:
    observation: CacheObservation
    state: str
    unknown_reason: str | None
    at: datetime

    @property
    def adapter(self) -> str:
        return self.observation.adapter

    @property
    def location(self) -> str:
        return self.observation.location

    def document(self) -> dict[str, Any]:
        o = self.observation
        return {
            "adapter": o.adapter,
            "location": o.location,
            "state": self.state,
            "reported_state": o.previous_state or o.state,
            "unknown_reason": self.unknown_reason,
            "observed_at": rfc3339(o.observed_at),
            "expires_at": rfc3339(o.expires_at),
            "age_s": max(0, int((self.at - o.observed_at).total_seconds())),
            "expires_in_s": max(0, int((o.expires_at - self.at).total_seconds())),
            "evidence": dict(o.evidence),
        }


@dataclass(frozen=True)
class SweepResult:
    observations_expired: int = 0
    requests_redispatched: int = 0
    skipped: int = 0
    requests_failed: int = 0  # given up on: adapter_unresponsive
    errors: list[str] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {"observations_expired": self.observations_expired,
                "requests_redispatched": self.requests_redispatched,
                "skipped": self.skipped,
                "requests_failed": self.requests_failed}


class CacheService:
    def __init__(self, store: CacheStore, clock: Any = utcnow):
        self._store = store
        self._clock = clock

    def report(self, tenant: str, model: str, adapter: str, location: str, state: str,
               evidence: dict[str, str], observed_at: datetime, ttl_seconds: int | None = None,
               *, not_after: datetime | None = None) -> CacheObservation:
        """Record an observation. Validates everything before anything is stored."""
        now = self._clock()
        validate_digest(model)
        validate_adapter(adapter)
        validate_location(adapter, location)
        validate_state(state)
        evidence = validate_evidence(evidence)
        observed_at = check_time(_aware_input(observed_at, "observed_at"), "observed_at", now,
                                 timedelta(seconds=MAX_FUTURE_S))
        if ttl_seconds is not None and (isinstance(ttl_seconds, bool)
                                        or not isinstance(ttl_seconds, int) or ttl_seconds < 1):
            raise InvalidInput("ttl_seconds must be a positive integer.", field="ttl_seconds")
        if not_after is not None:
            not_after = _aware(not_after, "not_after")
        obs = CacheObservation(tenant, model, adapter, location, state, evidence, observed_at,
                               expiry(observed_at, ttl_seconds, not_after), now)
        # Only a state that could be mistaken for a hit needs the sweep to fade it later.
        due = obs.expires_at if state != "unknown" else None
        applied = self._store.put_observation(obs, sweep_due=due)
        self._store.append_audit(obs, "reported" if applied else "superseded", now)
        return obs if applied else replace(obs, applied=False)

    def effective(self, tenant: str, model: str, adapter: str | None = None,
                  location: str | None = None) -> list[EffectiveObservation]:
        validate_digest(model, field="model_digest")
        if adapter is not None:
            validate_adapter(adapter)
        if location is not None:
            if adapter is None:
                # Location formats differ per adapter; any valid one may be asked for.
                if not any(_valid(a, location) for a in ADAPTERS):
                    raise InvalidInput("location is an availability zone (us-east-1a), a GCP "
                                       "zone (us-central1-a) or 'cluster/namespace'.",
                                       field="location")
            else:
                validate_location(adapter, location)
        now = self._clock()
        found = self._store.list_observations(tenant, model, adapter, location)
        return sorted((o.effective(now) for o in found), key=lambda e: (e.adapter, e.location))


def _valid(adapter: str, location: str) -> bool:
    try:
        validate_location(adapter, location)
    except InvalidInput:
        return False
    return True


class CacheSweeper:
    """The scheduled sweep: due items come from the sparse `sweep` index (a Query per shard)."""

    def __init__(self, store: CacheStore, prefetch: PrefetchService, clock: Any = utcnow,
                 limit: int = 1000):
        self._store = store
        self._prefetch = prefetch
        self._clock = clock
        self._limit = limit

    def sweep(self, now: datetime | None = None) -> SweepResult:
        now = now or self._clock()
        expired = skipped = 0
        for entry in self._store.due("obs", now, self._limit):
            try:
                obs = self._store.expire_observation(entry, now)
                if obs is None:
                    skipped += 1  # renewed meanwhile, or another sweep got there first
                    continue
                self._store.append_audit(obs, "expired", now)
            except Exception as exc:
                # One tenant's bad item never stops the sweep for the others (nor the re-sends
                # below): skipped, logged by key and error class, never by content.
                log.warning("sweep: observation %s/%s skipped: %s", entry.pk, entry.sk,
                            type(exc).__name__)
                skipped += 1
                continue
            expired += 1
        redispatched, more_skipped, failed = self._prefetch.redispatch_stuck(now, self._limit)
        return SweepResult(expired, redispatched, skipped + more_skipped, requests_failed=failed)
