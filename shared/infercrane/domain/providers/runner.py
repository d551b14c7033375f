"""Executes one adapter queue message: verify, prefetch (or release), observe, report, finish.

Idempotent under redelivery. The resource is found by its prefetch key (tag, label or
deterministic name) before anything is created; creation itself carries a deterministic token
(EC2 ClientToken, GCE requestId, a fixed Kubernetes name with 409 = done); the resource id is then
recorded on the request with a set-if-absent write. If two deliveries raced and both created, the
loser sees another id recorded and deletes its own copy, so one provider resource remains.

Still-preparing resources (`prefetching`) are re-checked later: the runner sends the same message
with `attempt + 1` to its own queue with a delay (`Rechecks`, SQS DelaySeconds), acknowledges the
current one, and gives up with `timeout: ...` after `max_rechecks`. The re-check never trusts the
previous observation: it reads the provider again. Prefetching observations get a short TTL, so if
re-checks stop, reads turn them `unknown` rather than keep a stale `prefetching`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from infercrane.domain.providers.message import AdapterMessage, Target
from infercrane.domain.providers.model import Assessment, ProviderCallFailed
from infercrane.errors import Conflict, DependencyUnavailable, DomainError, NotFound
from infercrane.ports.providers import (
    CacheReporter,
    PrefetchRequests,
    ProviderAdapter,
    ProviderRules,
    Rechecks,
)

log = logging.getLogger(__name__)
TERMINAL = ("completed", "failed")
RESOURCE_KEY = "resource_id"


@dataclass(frozen=True)
class RunnerPolicy:
    recheck_delay_s: int = 30
    max_rechecks: int = 40

    def delay(self, attempt: int) -> int:
        # Doubling back-off from the base, capped by SQS's DelaySeconds maximum (900 s).
        return int(min(900, self.recheck_delay_s * 2 ** min(max(attempt - 1, 0), 5)))


@dataclass
class Outcome:
    action: str
    state: str  # present | prefetching | missing | unknown | failed | released | skipped
    reason: str | None = None
    resource_id: str | None = None
    plan: dict[str, Any] | None = None
    recheck_in_s: int | None = None
    deleted: list[str] = field(default_factory=list)


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class AdapterRunner:
    def __init__(self, adapter: ProviderAdapter, rules: ProviderRules,
                 prefetch: PrefetchRequests, cache: CacheReporter,
                 classify: Callable[[str, str | None, str | None], Any],
                 clock: Callable[[], datetime], rechecks: Rechecks | None = None,
                 policy: RunnerPolicy | None = None):
        self.adapter, self.rules = adapter, rules
        self.prefetch, self.cache = prefetch, cache
        self.classify, self.clock = classify, clock
        self.rechecks = rechecks
        self.policy = policy or RunnerPolicy()

    # -- entry points --------------------------------------------------------------------------
    def handle(self, body: str) -> Outcome:
        """One queue record's body. A body that is not a valid message for this adapter (not
        JSON, nested too deep, another schema or adapter) is consumed as `invalid`, never raised:
        a retry cannot make it valid, and retrying is how a message reaches the DLQ. So is a
        verified message that fails for a non-transient domain reason. Only
        `DependencyUnavailable` (and unexpected errors after verification) raise, so the DLQ
        holds verified messages that failed transiently. Logs name the reason, never the body."""
        try:
            msg = AdapterMessage.model_validate_json(body)
        except (ValidationError, ValueError, RecursionError):
            log.warning("adapter message consumed: not a valid infercrane.prefetch/v1 message")
            return Outcome("invalid", "skipped", "invalid message")
        if msg.adapter != self.rules.provider:
            log.warning("adapter message consumed: it names another adapter")
            return Outcome("invalid", "skipped", "message for another adapter")
        try:
            return self.run(msg)
        except DependencyUnavailable:
            raise
        except DomainError as exc:
            log.warning("adapter message consumed: %s", exc.code)
            return Outcome(msg.action, "skipped", exc.code)

    def run(self, msg: AdapterMessage) -> Outcome:
        t = msg.target()
        try:
            request = self.prefetch.get(t.tenant, t.request_id)
        except NotFound:
            request = None
        if request is None:
            # Nothing to act for: the request is gone (or belongs to no such tenant). Retrying
            # cannot help, so the message is acknowledged and dropped.
            log.warning("adapter message for an unknown prefetch request dropped")
            return Outcome(msg.action, "skipped", "unknown prefetch request")
        try:
            if msg.action == "release":
                return self._release(t, request)
            status = _field(request, "status")
            if status in TERMINAL:
                return Outcome(msg.action, "skipped", f"request already {status}")
            self.prefetch.transition(t.tenant, t.request_id, "in_progress")
            return self._prefetch(msg, t)
        except ProviderCallFailed as exc:
            return self._provider_failure(msg, t, exc)
        except Conflict:
            # Another delivery finished the request meanwhile: nothing left to do here.
            return Outcome(msg.action, "skipped", "request finished by another delivery")

    # -- prefetch ------------------------------------------------------------------------------
    def _prefetch(self, msg: AdapterMessage, t: Target) -> Outcome:
        source = self.adapter.describe_source(t)
        verdict = self.rules.check_source(source, t)
        if verdict.status == "fail":
            return self._fail(t, verdict.reason or "verification_failed", "missing",
                              verdict.evidence)
        if verdict.status == "wait" or source is None:
            self._report(t, "prefetching", {**verdict.evidence, "reason": verdict.reason or ""},
                         self._prefetching_ttl(msg))
            return self._recheck(msg, t, Outcome("prefetch", "prefetching", verdict.reason))

        resource, created = self.adapter.find(t), False
        if resource is None:
            resource, created = self.adapter.create(t, source), True
            if resource is None:
                reason = "source being prepared before the resource is created"
                self._report(t, "prefetching", {**verdict.evidence, "reason": reason},
                             self._prefetching_ttl(msg))
                return self._recheck(msg, t, Outcome("prefetch", "prefetching", reason))
        rid = self.rules.resource_id(resource)
        stored = self.prefetch.record_resource(t.tenant, t.request_id, RESOURCE_KEY, rid)
        deleted: list[str] = []
        if stored != rid:
            if created and self.rules.owned(resource, t):
                # Lost a creation race: the recorded resource wins, ours is a duplicate.
                self.adapter.delete(t, rid)
                deleted.append(rid)
            recorded = self.adapter.describe(t, stored)
            if recorded is None:
                return self._fail(t, "missing: the recorded provider resource no longer exists",
                                  "missing", {"resource_id": stored})
            resource, rid = recorded, stored

        assessment = self.rules.assess(resource, t, self.adapter.facts(t, resource))
        evidence = {**verdict.evidence, **assessment.evidence, "resource_id": rid}
        out = self._conclude(msg, t, assessment, resource, evidence)
        out.deleted = deleted
        return out

    def _conclude(self, msg: AdapterMessage, t: Target, a: Assessment,
                  resource: dict[str, Any], evidence: dict[str, str]) -> Outcome:
        rid = evidence["resource_id"]
        if a.state == "failed":
            return self._fail(t, a.reason or "verification_failed", "missing", evidence)
        if a.state == "missing":
            return self._fail(t, f"missing: {a.reason}", "missing", evidence)
        if a.state == "prefetching":
            self._report(t, "prefetching", {**evidence, "reason": a.reason or ""},
                         self._prefetching_ttl(msg))
            return self._recheck(msg, t, Outcome("prefetch", "prefetching", a.reason, rid))
        plan = self.rules.plan(resource, t)
        plan_json = json.dumps(plan, sort_keys=True, separators=(",", ":"))
        self.prefetch.record_resource(t.tenant, t.request_id, "attach_plan", plan_json)
        self._report(t, "present", {**evidence, "read_only": "true", "attach_plan": plan_json})
        self.prefetch.transition(t.tenant, t.request_id, "completed")
        return Outcome("prefetch", "present", None, rid, plan)

    def _recheck(self, msg: AdapterMessage, t: Target, out: Outcome) -> Outcome:
        if msg.attempt >= self.policy.max_rechecks:
            reason = f"timeout: still prefetching after {msg.attempt} checks ({out.reason})"
            self.prefetch.transition(t.tenant, t.request_id, "failed", reason=reason)
            return Outcome("prefetch", "failed", reason, out.resource_id)
        delay = self.policy.delay(msg.attempt)
        if self.rechecks is not None:
            self.rechecks.schedule(msg.next_attempt(), delay)
            out.recheck_in_s = delay
        return out

    # -- release -------------------------------------------------------------------------------
    def _release(self, t: Target, request: Any) -> Outcome:
        recorded = (_field(request, "resources") or {}).get(RESOURCE_KEY)
        resource = self.adapter.describe(t, recorded) if recorded else None
        if resource is None:
            resource = self.adapter.find(t)
        if resource is None:
            self._report(t, "missing", {"released": "nothing to release"})
            return Outcome("release", "released", "nothing to release")
        rid = self.rules.resource_id(resource)
        if not self.rules.owned(resource, t):
            # Never delete what this prefetch did not create and tag.
            return Outcome("release", "skipped", "resource not created by this prefetch", rid)
        self.adapter.delete(t, rid)
        self._report(t, "missing", {"released": rid})
        return Outcome("release", "released", None, rid, deleted=[rid])

    # -- failures ------------------------------------------------------------------------------
    def _provider_failure(self, msg: AdapterMessage, t: Target,
                          exc: ProviderCallFailed) -> Outcome:
        result = self.classify(exc.provider, exc.provider_code, exc.provider_message)
        failure_class = str(_field(result, "failure_class") or "unknown")
        if failure_class == "transient":
            # Retryable API noise: fail the SQS record so it is redelivered (DLQ after retries).
            raise DependencyUnavailable("The provider API is temporarily unavailable.",
                                        field="provider") from exc
        reason = f"{failure_class}: {exc.provider_code or 'unknown error'}"
        if msg.action == "release":
            return Outcome("release", "failed", reason)
        return self._fail(t, reason, "unknown", {})

    def _fail(self, t: Target, reason: str, cache_state: str,
              evidence: dict[str, str]) -> Outcome:
        self._report(t, cache_state, {**evidence, "reason": reason})
        self.prefetch.transition(t.tenant, t.request_id, "failed", reason=reason)
        return Outcome("prefetch", "failed", reason, evidence.get("resource_id"))

    def _report(self, t: Target, state: str, evidence: dict[str, str],
                ttl_seconds: int | None = None) -> None:
        self.cache.report(t.tenant, t.model, t.adapter, t.location, state,
                          {k: v for k, v in evidence.items() if v != ""}, self.clock(),
                          ttl_seconds=ttl_seconds)

    def _prefetching_ttl(self, msg: AdapterMessage) -> int:
        # Outlives the next re-check by a margin, no more: a stopped re-check turns it unknown.
        return self.policy.delay(msg.attempt) * 2 + 60
