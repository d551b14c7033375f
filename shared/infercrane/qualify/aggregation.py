"""Aggregation: a generated set of lifecycle attempts with known ground truth must come back from
`GET /v1/capacity` with exact counts, success rates and failure classes (quota never counted as
capacity), and p50/p95 durations exact (exact method) or within the suite's fixed 1 % bound
(sketch), whatever bound the report declares — from the
not-yet-rolled-up tail, after the `aggregate` schedule ran, after a late arrival, coarsened by
`group_by`, and unchanged by another tenant's attempts."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.domain.batch import MAX_BATCH
from infercrane.qualify.common import missing_routes
from infercrane.qualify.core import PromiseResult
from infercrane.qualify.target import Target

PROMISE = "aggregation"
UNTIL = datetime(2025, 11, 24, tzinfo=UTC)
WINDOW = "720h"
DIMS = ("adapter", "runtime", "compute_mode", "region", "gpu")
# (dimensions, attempts, capacity code, quota code): sizes straddle the report's thresholds
# (p50 from 5, p95 from 20, exact up to 500, a sketch beyond).
GROUPS: tuple[tuple[tuple[str, str, str, str, str], int, str, str], ...] = (
    (("aws", "vllm", "on-demand", "us-east-1", "H100"), 640, "InsufficientInstanceCapacity",
     "VcpuLimitExceeded"),
    (("gcp", "sglang", "spot", "us-central1", "A100"), 150, "ZONE_RESOURCE_POOL_EXHAUSTED",
     "QUOTA_EXCEEDED"),
    (("aws", "tgi", "reserved", "eu-west-1", "L4"), 14, "InsufficientInstanceCapacity",
     "InstanceLimitExceeded"),
    (("aws", "vllm", "spot", "us-west-2", "H100"), 3, "InsufficientInstanceCapacity",
     "VcpuLimitExceeded"),
)


def _rfc(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


@dataclass
class Truth:
    samples: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    capacity: int = 0
    quota: int = 0
    durations_ms: list[int] = field(default_factory=list)

    def merge(self, other: Truth) -> Truth:
        return Truth(self.samples + other.samples, self.succeeded + other.succeeded,
                     self.failed + other.failed, self.cancelled + other.cancelled,
                     self.capacity + other.capacity, self.quota + other.quota,
                     self.durations_ms + other.durations_ms)


def generate(seed: int = 30, prefix: str = "qa") -> tuple[list[dict[str, Any]], dict[tuple[str, ...], Truth]]:
    """Attempts over 30 days before UNTIL and the truth about every group."""
    rng = random.Random(seed)
    # Twenty busy hours spread over the 30 days: every report reads per hour, so a set spread
    # over hundreds of hours costs minutes on moto without proving more.
    hours = sorted(rng.sample(range(1, 719), 20))
    attempts: list[dict[str, Any]] = []
    truth: dict[tuple[str, ...], Truth] = {}
    for dims, n, capacity_code, quota_code in GROUPS:
        t = truth.setdefault(dims, Truth())
        for _ in range(n):
            started = (UNTIL - timedelta(hours=720) + timedelta(hours=rng.choice(hours))
                       + timedelta(seconds=rng.randrange(0, 3000)))
            duration_ms = int(rng.lognormvariate(11.5, 0.6))  # ~100 s, long right tail
            roll = rng.random()
            item: dict[str, Any] = {
                "attempt_id": f"{prefix}-{len(attempts):05d}", "deployment": "qualify-capacity",
                "operation": rng.choice(["create", "start", "scale"]),
                **dict(zip(DIMS, dims, strict=True)), "gpu_count": rng.choice([1, 2, 8]),
                "started_at": _rfc(started)}
            t.samples += 1
            if roll < 0.08:
                item["outcome"] = "cancelled"
                t.cancelled += 1
            else:
                item["finished_at"] = _rfc(started + timedelta(milliseconds=duration_ms))
                t.durations_ms.append(duration_ms)
                if roll < 0.20:
                    item.update(outcome="failed", error_code=capacity_code,
                                error_message="Insufficient capacity in the requested zone.")
                    t.failed += 1
                    t.capacity += 1
                elif roll < 0.30:
                    item.update(outcome="failed", error_code=quota_code,
                                error_message="Quota exceeded for this resource.")
                    t.failed += 1
                    t.quota += 1
                else:
                    item["outcome"] = "succeeded"
                    t.succeeded += 1
            attempts.append(item)
    return attempts, truth


# The suite's own bar, stated here and never read from the report it checks (a report that
# declares a looser error or smaller sample floors must not lower the bar).
RELATIVE_ERROR = 0.01  # a sketch's quantile within 1 % of the true value at its rank
MIN_N_P50 = 5  # below this many durations a p50 is null with a reason
MIN_N_P95 = 20  # likewise for p95
MS_ROUNDING_S = 0.0005  # reported seconds may be rounded to the millisecond


def _rank_value(sorted_ms: Sequence[int], rank: float) -> int:
    return sorted_ms[min(len(sorted_ms) - 1, max(0, int(rank)))]


def exact_quantile_s(durations_ms: Sequence[int], q: float) -> float:
    """The lower nearest rank, 0-based index floor(q*(n-1)), computed here from the truth."""
    s = sorted(durations_ms)
    return s[math.floor(q * (len(s) - 1))] / 1000


def quantile_ok(reported_s: float | None, durations_ms: Sequence[int], q: float,
                method: str) -> bool:
    """An exact report must give exactly the truth's value at its rank; a sketch must lie within
    the suite's RELATIVE_ERROR of the values at the neighbouring ranks."""
    if reported_s is None or not durations_ms:
        return False
    if method == "exact":
        return abs(float(reported_s) - exact_quantile_s(durations_ms, q)) <= MS_ROUNDING_S
    s = sorted(durations_ms)
    r = q * (len(s) - 1)
    lo = _rank_value(s, math.floor(r) - 1) / 1000 * (1 - RELATIVE_ERROR)
    hi = _rank_value(s, math.ceil(r) + 1) / 1000 * (1 + RELATIVE_ERROR)
    return lo - MS_ROUNDING_S <= float(reported_s) <= hi + MS_ROUNDING_S


def check_report(report: Mapping[str, Any], truth: Mapping[tuple[str, ...], Truth],
                 group_by: Sequence[str], phase: str, result: PromiseResult) -> None:
    """Every ground-truth group, as `group_by` coarsens it, against the report's groups."""
    merged: dict[tuple[str | None, ...], Truth] = {}
    for dims, t in truth.items():
        key = tuple(v if d in group_by else None for d, v in zip(DIMS, dims, strict=True))
        merged[key] = merged.get(key, Truth()).merge(t)
    groups = {tuple(g.get(d) for d in DIMS): g for g in report.get("groups", [])}
    min50, min95 = MIN_N_P50, MIN_N_P95
    result.check(f"{phase}: exactly the ground-truth groups", set(groups) == set(merged),
                 f"{len(groups)} vs {len(merged)}")
    for key, t in sorted(merged.items(), key=lambda kv: -kv[1].samples):
        g = groups.get(key, {})
        name = f"{phase} n={t.samples}"
        decided = t.succeeded + t.failed
        result.check(f"{name}: samples/succeeded/failed/cancelled exact",
                     (g.get("samples"), g.get("succeeded"), g.get("failed"), g.get("cancelled"))
                     == (t.samples, t.succeeded, t.failed, t.cancelled),
                     str([g.get(k) for k in ("samples", "succeeded", "failed", "cancelled")]))
        rate = round(t.succeeded / decided, 6) if decided else None
        got = g.get("success_rate")
        result.check(f"{name}: success rate exact", got is not None and rate is not None
                     and abs(float(got) - rate) < 1e-6, f"{got} vs {rate}")
        failures = g.get("failures") or {}
        result.check(f"{name}: capacity failures exact (quota never capacity)",
                     failures.get("capacity") == t.capacity and failures.get("quota") == t.quota,
                     f"{failures.get('capacity')}/{failures.get('quota')} vs {t.capacity}/{t.quota}")
        n = len(t.durations_ms)
        method = str(g.get("duration_method", "exact"))
        for q, label, floor_n in ((0.5, "p50", min50), (0.95, "p95", min95)):
            value = g.get(f"{label}_duration_s")
            if n < floor_n:
                result.check(f"{name}: {label} null with a reason below n={floor_n}",
                             value is None and bool(g.get(f"{label}_null_reason")), str(value))
            else:
                result.check(f"{name}: {label} within the suite's bound ({method})",
                             quantile_ok(value, t.durations_ms, q, method), str(value))


def run(target: Target, tenant: str = "demo") -> PromiseResult:
    result = PromiseResult(PROMISE)
    missing = missing_routes(target, [("POST", "/v1/lifecycle-attempts"), ("GET", "/v1/capacity")])
    if missing:
        return result.not_available(", ".join(missing))
    attempts, truth = generate()

    def post(items: Sequence[Mapping[str, Any]], who: str) -> bool:
        ok = True
        for i in range(0, len(items), MAX_BATCH):
            r = target.request("POST", "/v1/lifecycle-attempts", tenant=who,
                               body={"items": list(items[i:i + MAX_BATCH])})
            doc = r.doc if isinstance(r.doc, dict) else {}
            ok &= r.status == 200 and doc.get("rejected") == 0
        return ok

    def report(group_by: Sequence[str] | None = None, who: str = tenant) -> dict[str, Any]:
        r = target.request("GET", "/v1/capacity", tenant=who, query={
            "window": WINDOW, "until": _rfc(UNTIL), "group_by": ",".join(group_by) if group_by else None})
        return r.doc if r.status == 200 and isinstance(r.doc, dict) else {}

    result.check(f"{len(attempts)} attempts accepted", post(attempts, tenant))
    result.check("re-sent attempts change nothing", post(attempts[:100], tenant))
    first = report()
    result.check("report scope is tenant-observed", first.get("scope") == "tenant-observed")
    check_report(first, truth, DIMS, "tail", result)
    tick = target.tick("aggregate")
    result.check("aggregate schedule fired", tick.status == 200, f"HTTP {tick.status}")
    rolled = report()
    check_report(rolled, truth, DIMS, "rollups", result)
    check_report(report(["adapter", "gpu"]), truth, ["adapter", "gpu"], "group_by adapter,gpu",
                 result)
    # A late arrival is folded into its (already rolled-up) hour.
    late, _ = generate(seed=31, prefix="qa-late")
    late_one = next(a for a in late if a["outcome"] == "succeeded")
    late_one["attempt_id"] = "qa-late-00001"
    dims = tuple(late_one[d] for d in DIMS)
    post([late_one], tenant)
    target.tick("aggregate")
    grown = dict(truth)
    extra = Truth(1, 1, 0, 0, 0, 0, [_duration_ms(late_one)])
    grown[dims] = grown[dims].merge(extra)
    before = report()
    check_report(before, grown, DIMS, "late arrival", result)
    # Another tenant's attempts (same groups, other ids) neither appear nor change anything.
    other, _ = generate(seed=32, prefix="qa-other")
    result.check("other tenant's attempts accepted", post(other[::4], "other"))
    target.tick("aggregate")
    after = report()
    result.check("another tenant's attempts do not change this tenant's report",
                 before.get("groups") == after.get("groups") and bool(before.get("groups")))
    result.tried = (f"{len(attempts)} generated attempts in {len(GROUPS)} groups over 30 days "
                    "(quota/capacity codes, cancellations), checked from the tail, from rollups, "
                    "coarsened, after a late arrival, and against another tenant's set")
    result.facts = {"attempts": len(attempts), "groups": len(GROUPS),
                    "durations_method": (rolled.get("durations") or {}).get("exact"),
                    "relative_error": (rolled.get("durations") or {}).get("relative_error")}
    return result


def _duration_ms(attempt: Mapping[str, Any]) -> int:
    def parse(s: str) -> datetime:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))

    return int((parse(attempt["finished_at"]) - parse(attempt["started_at"])).total_seconds() * 1000)

