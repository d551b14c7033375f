"""One provider's scenario through the port: list and remove leftovers, prefetch `repeats`
times, check each plan is read-only, delete what it made and confirm the adapter finds none."""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from infercrane.domain.classifier import classify
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import ProviderCallFailed
from infercrane.errors import DependencyUnavailable
from infercrane.ports.providers import ProviderAdapter, ProviderRules
from infercrane.qualify.core import PromiseResult
from infercrane.qualify.providers.journal import Journal
from infercrane.qualify.providers.targets import TENANT_PREFIX, ProviderTarget


def quantile(values: list[float], q: float) -> float | None:
    """Lower nearest rank (the capacity report's exact method)."""
    if not values:
        return None
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def read_only_violations(plan: Mapping[str, Any], provider: str) -> list[str]:
    """Where an attach/mount plan would let the model be written: it must say `read_only` at
    the top, name its provider, and nowhere inside ask for a writable mode."""
    bad: list[str] = []
    if plan.get("read_only") is not True:
        bad.append("read_only")
    if plan.get("provider") != provider:
        bad.append("provider")

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                here = f"{path}.{k}" if path else str(k)
                writable = ((k in ("readOnly", "read_only") and v is not True)
                            or (k == "mode" and v != "READ_ONLY")
                            or (k == "options" and isinstance(v, list) and "ro" not in v))
                if writable:
                    bad.append(here)
                walk(v, here)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(plan, "")
    return bad


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Scenario:
    """One provider's run, through the port only. `clock`/`sleep` are injectable for tests."""

    adapter: ProviderAdapter
    rules: ProviderRules
    journal: Journal
    wait_s: float = 900.0
    poll_s: float = 5.0
    cleanup_wait_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    echo: Callable[[str], None] = _stderr
    outcomes: dict[str, int] = field(default_factory=dict)
    codes: dict[str, dict[str, int]] = field(default_factory=dict)

    def _count(self, outcome: str, code: str | None = None) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if code is not None:
            by_code = self.codes.setdefault(outcome, {})
            by_code[code] = by_code.get(code, 0) + 1

    @contextlib.contextmanager
    def _provider_calls(self) -> Iterator[None]:
        """Count a failed provider call under its capacity class instead of stopping the run."""
        try:
            yield
        except ProviderCallFailed as exc:
            cls = classify(exc.provider, exc.provider_code, exc.provider_message)
            self._count(cls.failure_class, exc.provider_code or "unknown")
        except DependencyUnavailable:
            # The adapters raise this for 5xx/429/network: retryable API noise.
            self._count("transient", "unavailable")

    def leftovers(self, provider: str, run_id: str) -> list[tuple[Target, str, bool]]:
        """Journaled resources of earlier runs the adapter still sees: (target, id, owned)."""
        found: list[tuple[Target, str, bool]] = []
        for e in self.journal.entries(provider, other_than=run_id):
            t = Journal.target(e)
            resource = self.adapter.describe(t, e["resource_id"])
            if resource is None or self.adapter.find(t) is None:
                self.journal.remove(provider, e["resource_id"])  # gone (or being deleted)
                continue
            found.append((t, e["resource_id"], self.rules.owned(resource, t)))
        return found

    def run(self, pt: ProviderTarget, *, dry_run: bool, run_id: str | None = None) -> PromiseResult:
        run_id = run_id or "q" + secrets.token_hex(5)
        result = PromiseResult(f"{pt.provider} cache and capacity")
        planned = pt.targets(run_id)
        old = self.leftovers(pt.provider, run_id)
        self.echo(f"{pt.provider} dry run: would create {len(planned)} resource(s) "
                  f"{', '.join(t.name for t in planned)} from {pt.source} in {pt.location} "
                  f"(tenants {TENANT_PREFIX}{run_id}-0..{len(planned) - 1}); leftovers of earlier "
                  f"runs: {', '.join(rid for _, rid, _ in old) or 'none'}")
        result.check("dry run listed planned and leftover resources", True)
        if dry_run:
            result.tried = "dry run only"
            result.facts = {"planned": len(planned), "leftovers": len(old), "location": pt.location}
            return result

        for t, rid, owned in old:
            if owned:
                self._delete(t, rid)
        left = [rid for t, rid, _ in old if self.adapter.find(t) is not None]
        result.check("leftovers of earlier runs removed (those the rules call ours)", not left,
                     ", ".join(left))

        source: dict[str, Any] | None = None
        verdict_ok, reason = False, "provider call failed"
        with self._provider_calls():
            source = self.adapter.describe_source(planned[0])
            verdict = self.rules.check_source(source, planned[0])
            verdict_ok, reason = verdict.status == "ok", verdict.reason or verdict.status
        result.check("source verified by the provider rules", verdict_ok and source is not None,
                     reason)
        if source is None or not verdict_ok:
            result.tried = f"source {pt.source} not usable"
            result.facts = self._facts(pt, [])
            return result

        timings: list[float] = []
        plans_bad: list[str] = []
        created: list[tuple[Target, str]] = []
        not_ours: list[str] = []
        for t in planned:
            made = self._prefetch(t, source, run_id, timings, plans_bad)
            if made is not None:
                created.append((t, made))
                if not self._delete(t, made):
                    not_ours.append(made)

        result.check("at least one prefetch reached present", bool(timings),
                     json.dumps(self.outcomes, sort_keys=True))
        result.check("every present resource has a read-only attach/mount plan", not plans_bad,
                     "; ".join(plans_bad))
        result.check("the rules recognise every created resource as this prefetch's",
                     not not_ours, ", ".join(not_ours))
        left = [rid for t, rid in created if self.adapter.find(t) is not None]
        result.check("nothing the run created is left", not left, ", ".join(left))
        result.tried = f"{pt.repeats} prefetches of {pt.source} into {pt.location}"
        result.facts = self._facts(pt, timings)
        return result

    def _prefetch(self, t: Target, source: dict[str, Any], run_id: str, timings: list[float],
                  plans_bad: list[str]) -> str | None:
        """find-or-create, then describe+assess until present, terminal or timeout. Returns the
        id of the resource (to delete), if one exists."""
        rid: str | None = None
        t0 = self.clock()
        with self._provider_calls():
            resource = self.adapter.find(t)
            while resource is None:
                # None: the provider is preparing the source first (AWS: FSR being enabled).
                resource = self.adapter.create(t, source)
                if resource is None:
                    if self.clock() - t0 >= self.wait_s:
                        self._count("timeout", "source still being prepared")
                        return None
                    self.sleep(self.poll_s)
            rid = self.rules.resource_id(resource)
            self.journal.add(run_id, t, rid)
            while True:
                a = self.rules.assess(resource, t, self.adapter.facts(t, resource))
                if a.state == "present":
                    timings.append(round(self.clock() - t0, 3))
                    self._count("present")
                    bad = read_only_violations(self.rules.plan(resource, t), t.adapter)
                    if bad:
                        plans_bad.append(f"{rid}: {', '.join(bad)}")
                    break
                if a.state in ("failed", "missing"):
                    # `failed` is a verification failure (the contract broke), never capacity.
                    self._count("verification_failed" if a.state == "failed" else "missing")
                    break
                if self.clock() - t0 >= self.wait_s:
                    self._count("timeout", "still prefetching")
                    break
                self.sleep(self.poll_s)
                described = self.adapter.describe(t, rid)
                if described is None:
                    self._count("missing")
                    break
                resource = described
        return rid

    def _delete(self, t: Target, rid: str) -> bool:
        """Delete `rid` if the rules say it is `t`'s, then wait until the adapter no longer finds
        it. False when the resource is not ours (it is left alone)."""
        with self._provider_calls():
            resource = self.adapter.describe(t, rid)
            if resource is None:
                self.journal.remove(t.adapter, rid)
                return True
            if not self.rules.owned(resource, t):
                return False
            self.adapter.delete(t, rid)
            deadline = self.clock() + self.cleanup_wait_s
            while self.adapter.find(t) is not None and self.clock() < deadline:
                self.sleep(self.poll_s)
            if self.adapter.find(t) is None:
                self.journal.remove(t.adapter, rid)
        return True

    def _facts(self, pt: ProviderTarget, timings: list[float]) -> dict[str, Any]:
        return {"prefetch_to_present_s": {"n": len(timings), "p50": quantile(timings, 0.5),
                                          "p95": quantile(timings, 0.95), "values": timings},
                "outcomes": dict(sorted(self.outcomes.items())),
                "codes": {k: dict(sorted(v.items())) for k, v in sorted(self.codes.items())},
                "location": pt.location, "repeats": pt.repeats}

