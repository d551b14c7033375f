"""Placement advice: where this tenant's own attempts say a GPU is most likely to come up.

Ranks region x compute mode x adapter x runtime for one GPU type by the lower bound of the 95 %
Wilson interval of placement success, then by p95 duration, from the tenant's capacity report.
Quota failures are the tenant's own limit, not the placement's availability: they are left out
of the placement interval, and a group whose recent failures are mostly quota is flagged
"quota, not capacity: raise the limit" instead of being ranked down as unavailable.
It reads one tenant's report only, so it can never combine tenants.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infercrane.domain.classifier import FAILURE_CLASSES
from infercrane.domain.uncertainty import MIN_N_RATE, strength, wilson_interval
from infercrane.domain.validation import SHORT_NAME_RE
from infercrane.errors import InvalidInput

if TYPE_CHECKING:
    from infercrane.domain.capacity.service import CapacityService

ADAPTERS = ("aws", "gcp", "kubernetes")
RECENT_HOURS = 24
QUOTA_FLAG = "quota, not capacity: raise the limit"
_GPU = SHORT_NAME_RE
RANKING_RULE = ("by the lower bound of the 95 % Wilson interval of placement success "
                "(succeeded / (succeeded + non-quota failures)), higher first; then by p95 duration, "
                "shorter first (unknown last); then by more decided attempts")
NOTE = ("Tenant-observed evidence: only this tenant's own lifecycle attempts. It is not global "
        "availability, never combines tenants, and says nothing about places this tenant has not "
        "tried.")
COUNT_NOTE = ("Rollups group attempts by GPU type, not GPU count: the evidence covers every count "
              "of this type this tenant attempted.")


def _check(gpu: str, count: int | None, adapter: str | None) -> None:
    if not isinstance(gpu, str) or not _GPU.match(gpu):
        raise InvalidInput("gpu is a GPU type such as H100: 1-64 letters, digits, '.', '_' or "
                           "'-'.", field="gpu")
    if count is not None and not 1 <= count <= 4096:
        raise InvalidInput("count must be between 1 and 4096.", field="count")
    if adapter is not None and adapter not in ADAPTERS:
        raise InvalidInput("adapter is one of aws, gcp, kubernetes.", field="adapter")


def _key(g: dict[str, Any]) -> tuple[str, str, str, str]:
    return (g["region"], g["compute_mode"], g["adapter"], g["runtime"])


def _dominant(failures: dict[str, int]) -> dict[str, Any] | None:
    total = sum(failures.values())
    if not total:
        return None
    # Ties go to the class listed first in the classifier (capacity before quota, ...).
    cls = max(FAILURE_CLASSES, key=lambda c: (failures.get(c, 0), -FAILURE_CLASSES.index(c)))
    return {"class": cls, "count": failures[cls], "of": total}


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def option(g: dict[str, Any], recent: dict[str, Any] | None) -> dict[str, Any]:
    quota = int(g["failures"]["quota"])
    placement_failed = int(g["failed"]) - quota
    n = int(g["succeeded"]) + placement_failed
    interval = wilson_interval(int(g["succeeded"]), n)
    recent_failures = recent["failures"] if recent else {}
    recent_failed = sum(recent_failures.values())
    quota_flag = recent_failed > 0 and 2 * recent_failures.get("quota", 0) >= recent_failed
    dominant = _dominant(g["failures"])
    parts = [f"n={n} placement attempts ({g['succeeded']} succeeded, {placement_failed} failed"
             + (f"; {quota} quota failures left out" if quota else "") + ")"]
    parts.append("no decided attempts" if interval is None else
                 f"success 95% CI {_pct(interval[0])}-{_pct(interval[1])}")
    if dominant:
        parts.append(f"dominant failure {dominant['class']} ({dominant['count']} of "
                     f"{dominant['of']})")
    estimated = g["duration_method"] != "exact"
    if g["p95_duration_s"] is not None:
        # `≈`: a DDSketch estimate (within duration_relative_error of the true value).
        parts.append(f"p95 {'≈' if estimated else ''}{g['p95_duration_s']:,.0f} s")
    else:
        parts.append(f"p95 too few samples (n={g['duration_samples']})")
    return {
        "region": g["region"], "compute_mode": g["compute_mode"], "adapter": g["adapter"],
        "runtime": g["runtime"], "gpu": g["gpu"],
        "samples": g["samples"], "succeeded": g["succeeded"], "failed": g["failed"],
        "quota_failures": quota, "placement_n": n,
        "success_interval": None if interval is None else [round(v, 6) for v in interval],
        "lower_bound": None if interval is None else round(interval[0], 6),
        "insufficient": n < MIN_N_RATE, "evidence": strength(interval, n),
        "p95_duration_s": g["p95_duration_s"], "duration_samples": g["duration_samples"],
        "duration_method": g["duration_method"],
        "duration_relative_error": g["duration_relative_error"],
        "dominant_failure": dominant,
        "recent_failures": recent_failed,
        "flag": QUOTA_FLAG if quota_flag else None,
        "basis": "; ".join(parts),
    }


def _rank_key(o: dict[str, Any]) -> tuple[float, float, int, tuple[str, ...]]:
    lower = -1.0 if o["lower_bound"] is None else o["lower_bound"]
    p95 = math.inf if o["p95_duration_s"] is None else o["p95_duration_s"]
    return (-lower, p95, -o["placement_n"], tuple(str(o[k]) for k in
                                                  ("region", "compute_mode", "adapter", "runtime")))


def _why(o: dict[str, Any], above: dict[str, Any] | None) -> str:
    if above is None:
        return "first: the highest lower bound of placement success"
    lo, lo_above = o["lower_bound"], above["lower_bound"]
    if lo is None:
        return "no decided placement attempts: nothing to rank by"
    if lo_above is not None and lo < lo_above:
        return f"lower bound {_pct(lo)} is below {_pct(lo_above)} of the option above"
    if o["p95_duration_s"] != above["p95_duration_s"]:
        mine = "unknown" if o["p95_duration_s"] is None else f"{o['p95_duration_s']:,.0f} s"
        return f"same lower bound, but p95 {mine} is slower than the option above"
    return "ties the option above on lower bound and p95; fewer decided attempts"


def rank(report_groups: list[dict[str, Any]], recent_groups: list[dict[str, Any]], gpu: str,
         adapter: str | None) -> list[dict[str, Any]]:
    recent = {_key(g): g for g in recent_groups if g["gpu"] == gpu}
    options = [option(g, recent.get(_key(g))) for g in report_groups
               if g["gpu"] == gpu and (adapter is None or g["adapter"] == adapter)]
    options.sort(key=_rank_key)
    for i, o in enumerate(options):
        o["rank"] = i + 1
        o["why"] = _why(o, options[i - 1] if i else None)
    return options


def advise(service: CapacityService, tenant: str, *, gpu: str, count: int | None,
           adapter: str | None, window: str, until: datetime | None,
           now: datetime) -> dict[str, Any]:
    """The placement advice document for one tenant (the same for the CLI and the API)."""
    _check(gpu, count, adapter)
    report = service.report(tenant, window, until, None, now)
    recent_hours = min(RECENT_HOURS, int(report["window"]["hours"]))
    recent = service.report(tenant, f"{recent_hours}h", until, None, now)
    options = rank(report["groups"], recent["groups"], gpu, adapter)
    return {
        "scope": "tenant-observed",
        "note": NOTE,
        "query": {"gpu": gpu, "count": count, "adapter": adapter, "window": window},
        "gpu_count_note": COUNT_NOTE,
        "window": report["window"],
        "recent_window_hours": recent_hours,
        "classifier_version": report["classifier_version"],
        "ranking": RANKING_RULE,
        "quota_rule": (f"quota failures are the tenant's limit, not availability: left out of the "
                       f"interval; options whose failures in the last {recent_hours} h are at "
                       f"least half quota are flagged \"{QUOTA_FLAG}\""),
        "options": options,
    }
