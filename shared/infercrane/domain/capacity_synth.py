"""Deterministic lifecycle attempts with known ground truth (tests, the scale script, demos).

`generate(n, seed, end)` spreads n attempts over the 30 days (720 whole hours) before `end`, every
hour receiving at least one when n >= 720 (`hours=` narrows the span for slow backends), over a
fixed catalogue of 24 groups. Each failure uses a provider code/message from provider-errors.md
whose class is written here by hand (not computed by the classifier), so a report can be checked
against counts that were never derived from it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

HOURS = 720
HOUR_MS = 3_600_000

# (code, message, expected class, structural)
FAILURES: dict[str, list[tuple[str | None, str | None, str, bool]]] = {
    "aws": [
        ("InsufficientInstanceCapacity", "We currently do not have sufficient p5.48xlarge capacity "
         "in the Availability Zone you requested (us-east-1a).", "capacity", False),
        ("Unsupported", "Your requested instance type (p4d.24xlarge) is not supported in your "
         "requested Availability Zone (us-east-1e).", "capacity", True),
        ("VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit "
         "of 192 allows.", "quota", False),
        ("UnauthorizedOperation", "You are not authorized to perform this operation.",
         "permission_config", False),
        ("RequestLimitExceeded", "Request limit exceeded.", "transient", False),
        (None, "The primary container for production variant AllTraffic did not pass the ping "
         "health check.", "runtime", False),
    ],
    "gcp": [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not have "
         "enough resources available to fulfill the request.", "capacity", False),
        ("QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally.", "quota", False),
        ("IAM_PERMISSION_DENIED", "Required 'compute.instances.create' permission.",
         "permission_config", False),
        ("RESOURCE_OPERATION_RATE_EXCEEDED", "Operation rate exceeded.", "transient", False),
        (None, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
         "runtime", False),
    ],
    "kubernetes": [
        ("FailedScheduling", "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
         "capacity", False),
        ("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached",
         "quota", False),
        ("ImagePullBackOff", "Back-off pulling image", "permission_config", False),
        ("CrashLoopBackOff", "back-off 5m0s restarting failed container", "runtime", False),
        ("ProgressDeadlineExceeded", "ReplicaSet has timed out progressing.", "timeout", False),
        ("SomethingNew", "an error nobody has catalogued", "unknown", False),
    ],
}

RUNTIME = {"aws": ["vllm", "tgi"], "gcp": ["vllm", "sglang"], "kubernetes": ["vllm", "sglang"]}
REGION = {"aws": "us-east-1", "gcp": "us-central1", "kubernetes": "onprem-a"}
MODES = ["on-demand", "spot"]
GPUS = ["H100", "L4"]


@dataclass(frozen=True)
class GroupProfile:
    adapter: str
    runtime: str
    compute_mode: str
    region: str
    gpu: str
    p_fail: float
    p_cancel: float
    capacity_weight: float  # how much more often capacity failures are drawn
    median_s: float

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.adapter, self.runtime, self.compute_mode, self.region, self.gpu)


def catalogue() -> list[GroupProfile]:
    out = []
    for adapter in ("aws", "gcp", "kubernetes"):
        for runtime in RUNTIME[adapter]:
            for mode in MODES:
                for gpu in GPUS:
                    spot_h100 = mode == "spot" and gpu == "H100"
                    out.append(GroupProfile(
                        adapter, runtime, mode, REGION[adapter], gpu,
                        p_fail=0.45 if spot_h100 else 0.12, p_cancel=0.03,
                        capacity_weight=8.0 if spot_h100 else 1.0,
                        median_s={"aws": 240.0, "gcp": 180.0, "kubernetes": 60.0}[adapter]
                        * (2.0 if gpu == "H100" else 1.0)))
    return out


@dataclass
class GroupTruth:
    samples: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    structural: int = 0
    durations_ms: list[int] = field(default_factory=list)

    def quantile_ms(self, q: float) -> int:
        ordered = sorted(self.durations_ms)
        return ordered[math.floor(q * (len(ordered) - 1))]


@dataclass
class Synthetic:
    attempts: list[dict[str, Any]]
    truth: dict[tuple[str, str, str, str, str], GroupTruth]
    start: datetime
    end: datetime


def _rfc(ms: int) -> str:
    dt = datetime.fromtimestamp(ms // 1000, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def generate(n: int, seed: int, end: datetime, id_prefix: str = "att",
             hours: int = HOURS) -> Synthetic:
    """n attempts with started_at in the `hours` whole hours (default 720, 30 days) before `end`
    (rounded down to the hour); every hour gets one when n >= hours."""
    rng = random.Random(seed)
    end_ms = (int(end.timestamp() * 1000) // HOUR_MS) * HOUR_MS
    start_ms = end_ms - hours * HOUR_MS
    groups = catalogue()
    truth = {g.key: GroupTruth() for g in groups}
    attempts = []
    for i in range(n):
        hour = i % hours if i < hours else rng.randrange(hours)
        g = groups[rng.randrange(len(groups))]
        started = start_ms + hour * HOUR_MS + rng.randrange(HOUR_MS)
        duration = max(1, int(rng.lognormvariate(math.log(g.median_s * 1000), 0.6)))
        roll = rng.random()
        outcome = "failed" if roll < g.p_fail else ("cancelled" if roll < g.p_fail + g.p_cancel
                                                    else "succeeded")
        t = truth[g.key]
        t.samples += 1
        doc: dict[str, Any] = {
            "attempt_id": f"{id_prefix}-{seed}-{i:07d}", "deployment": f"dep-{i % 7}",
            "operation": ("create", "start", "scale", "update")[i % 4], "adapter": g.adapter,
            "runtime": g.runtime, "compute_mode": g.compute_mode, "region": g.region,
            "zone": f"{g.region}-{'abc'[i % 3]}", "gpu": g.gpu, "gpu_count": 1 + i % 8,
            "started_at": _rfc(started), "finished_at": _rfc(started + duration),
            "outcome": outcome,
        }
        if outcome == "failed":
            options = FAILURES[g.adapter]
            weights = [g.capacity_weight if cls == "capacity" else 1.0 for _, _, cls, _ in options]
            code, message, cls, structural = rng.choices(options, weights)[0]
            doc["error_code"], doc["error_message"] = code, message
            t.failed += 1
            t.failures[cls] = t.failures.get(cls, 0) + 1
            t.structural += int(structural)
        elif outcome == "cancelled":
            t.cancelled += 1
        else:
            t.succeeded += 1
        if outcome != "cancelled":
            t.durations_ms.append(duration)
        attempts.append(doc)
    return Synthetic(attempts, truth, datetime.fromtimestamp(start_ms / 1000, UTC),
                     datetime.fromtimestamp(end_ms / 1000, UTC))


def batches(items: list[dict[str, Any]], size: int = 500) -> Iterator[list[dict[str, Any]]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
