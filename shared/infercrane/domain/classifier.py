"""Normalizes a provider's raw failure (code + message) into one failure class.

Classes: `capacity`, `quota`, `permission_config`, `runtime`, `timeout`, `transient`, `unknown`.
The raw code and message are always kept next to the result together with `CLASSIFIER_VERSION`, so
history can be re-classified when this table changes: **bump the version on every rule change**.

The table is evaluated top to bottom and the first matching rule wins. It is ordered in tiers:

1. ``refine``  - a code whose meaning depends on the message (e.g. Kubernetes `NotTriggerScaleUp`
   is capacity unless the message says "max node group size reached", which is quota).
2. ``code``    - provider-specific codes with one meaning (`InsufficientInstanceCapacity`, ...).
   Codes are matched case-insensitively and only for their own provider, because namespaces
   overlap (`Error` is a Kubernetes container reason, `Unavailable` an AWS API error).
3. ``message`` - message patterns, for any provider (engine messages from vLLM / TGI / SGLang
   come through every adapter). Within this tier quota precedes capacity, and capacity precedes
   permission_config and runtime.
4. ``generic`` - codes that only say *how* something failed, not *why* (`FailedScheduling`,
   gRPC `RESOURCE_EXHAUSTED`, deadline codes): used only when no message rule explained it.
5. ``timeout`` - timeout wording in the message: only when no stronger cause was seen.

Quota is never capacity: every quota code maps to `quota`, and quota message rules are tried
before capacity message rules.

Ambiguous choices (documented on purpose; see also docs/capacity.md):
- GCP `UNSUPPORTED_OPERATION` is `capacity` when the message mentions preemption (a spot VM
  reclaimed during create is a capacity signal, like AWS `Server.SpotInstanceTermination`);
  otherwise `permission_config` (an operation the resource does not support is a request problem).
- GCP `RESOURCE_NOT_FOUND` (reported after the adapter's retries) is `permission_config`: retries
  rule out eventual consistency, so a missing image/network/template is a configuration error.
- A Kubernetes scheduling message naming both `Insufficient <resource>` and a selector/taint
  mismatch is `capacity`: mismatched nodes were never candidates, the candidate nodes were full.
- A cluster-autoscaler message naming both "max node group size reached" and `Insufficient ...`
  is `quota`: the limit that stopped the scale-up is the tenant's own node-group maximum.
- Kubernetes `TriggeredScaleUp` is not a failure (nodes are coming): class `unknown` with
  `is_failure=False`, so it never counts towards any failure class as a cause.
- AWS `Unsupported` is `capacity` with `persistent=True` (structural: the type does not exist in
  that zone); reports keep it out of stock-out rates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

CLASSIFIER_VERSION = "2026-11-30.1"
# Versions this table replaced. The aggregator re-classifies rollups and attempts of these; when you
# bump CLASSIFIER_VERSION, append the old value here.
# .2: EBS InsufficientVolumeCapacity is capacity; Kubernetes API 403s are quota ("exceeded
#     quota", a ResourceQuota) or permission_config (RBAC), as the provider adapters meet them.
PREVIOUS_VERSIONS: tuple[str, ...] = ("2026-11-29.1",)

FailureClass = Literal[
    "capacity", "quota", "permission_config", "runtime", "timeout", "transient", "unknown"
]
FAILURE_CLASSES: tuple[FailureClass, ...] = (
    "capacity", "quota", "permission_config", "runtime", "timeout", "transient", "unknown",
)
PROVIDERS = ("aws", "gcp", "kubernetes")
_MAX_MESSAGE_CHARS = 8192  # bounds regex work on pathological messages


@dataclass(frozen=True)
class Classification:
    failure_class: FailureClass
    rule: str
    version: str = CLASSIFIER_VERSION
    persistent: bool = False  # structural capacity (e.g. AWS `Unsupported`): not a stock-out
    is_failure: bool = True  # False for signals such as `TriggeredScaleUp`


class _Pattern:
    """A case-insensitive regex compiled on first use: importing the classifier (every function
    that imports the capacity domain, including those that never classify) compiles nothing."""

    def __init__(self, source: str):
        self.source = source

    @cached_property
    def _compiled(self) -> re.Pattern[str]:
        return re.compile(self.source, re.IGNORECASE)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self._compiled.fullmatch(text)

    def search(self, text: str) -> re.Match[str] | None:
        return self._compiled.search(text)


@dataclass(frozen=True)
class Rule:
    name: str
    failure_class: FailureClass
    providers: frozenset[str] | None = None  # None: any provider
    codes: _Pattern | None = None  # full match, case-insensitive
    message: _Pattern | None = None  # search, case-insensitive
    persistent: bool = False
    is_failure: bool = True

    def matches(self, provider: str, code: str, message: str) -> bool:
        if self.providers is not None and provider not in self.providers:
            return False
        if self.codes is not None and not self.codes.fullmatch(code):
            return False
        return self.message is None or bool(self.message.search(message))


def _codes(names: Iterable[str]) -> _Pattern:
    # A trailing `*` in a name is a prefix match (AWS `AccessDenied*`).
    parts = [re.escape(n[:-1]) + r"\S*" if n.endswith("*") else re.escape(n) for n in names]
    return _Pattern("|".join(parts))


def _msg(*patterns: str) -> _Pattern:
    return _Pattern("|".join(f"(?:{p})" for p in patterns))


_AWS = frozenset({"aws"})
_GCP = frozenset({"gcp"})
_K8S = frozenset({"kubernetes"})
_K8S_GCP = frozenset({"kubernetes", "gcp"})  # GKE events reach the GCP adapter too

# -- tier 1: codes refined by their message --------------------------------------------------
_REFINE: tuple[Rule, ...] = (
    Rule("kubernetes.autoscaler.max_node_group_size", "quota", _K8S_GCP,
         codes=_codes(["NotTriggerScaleUp"]), message=_msg(r"max node group size reached")),
    Rule("kubernetes.autoscaler.not_triggered", "capacity", _K8S_GCP,
         codes=_codes(["NotTriggerScaleUp"])),
    Rule("kubernetes.autoscaler.triggered_scale_up", "unknown", _K8S_GCP,
         codes=_codes(["TriggeredScaleUp"]), is_failure=False),
    # A namespace ResourceQuota refuses with 403 Forbidden: the admin's limit, not RBAC.
    Rule("kubernetes.api.resource_quota", "quota", _K8S,
         codes=_codes(["Forbidden"]), message=_msg(r"exceeded quota")),
    Rule("gcp.unsupported_operation.preempted", "capacity", _GCP,
         codes=_codes(["UNSUPPORTED_OPERATION"]), message=_msg(r"preempt")),
    Rule("gcp.unsupported_operation", "permission_config", _GCP,
         codes=_codes(["UNSUPPORTED_OPERATION"])),
    Rule("gcp.resource_not_found_after_retries", "permission_config", _GCP,
         codes=_codes(["RESOURCE_NOT_FOUND"])),
)

# -- tier 2: provider codes ------------------------------------------------------------------
_CODE: tuple[Rule, ...] = (
    # AWS
    Rule("aws.capacity.unsupported", "capacity", _AWS, codes=_codes(["Unsupported"]),
         persistent=True),
    Rule("aws.capacity", "capacity", _AWS, codes=_codes([
        "InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacityOnHost",
        "InsufficientReservedInstanceCapacity", "InsufficientCapacity", "UnfulfillableCapacity",
        "ReservationCapacityExceeded", "SpotMaxPriceTooLow", "Server.InsufficientInstanceCapacity",
        "Server.SpotInstanceTermination", "Server.SpotInstanceShutdown", "CapacityError",
        "InsufficientVolumeCapacity",  # EBS: the volume type is out of capacity in the AZ
    ])),
    Rule("aws.quota", "quota", _AWS, codes=_codes([
        "VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded",
        "MaxSpotFleetRequestCountExceeded", "VolumeLimitExceeded", "MaxIOPSLimitExceeded",
        "TargetCapacityLimitExceededException", "InsufficientFreeAddressesInSubnet",
        "ResourceLimitExceeded",
    ])),
    Rule("aws.permission_config", "permission_config", _AWS, codes=_codes([
        "UnauthorizedOperation", "AuthFailure", "Blocked", "OptInRequired", "InvalidParameterValue",
        "InvalidParameterCombination", "InvalidAMIID.NotFound", "InvalidSubnetID.NotFound",
        "AccessDenied*", "ExpiredToken", "ExpiredTokenException", "RequestExpired",
        "InvalidClientTokenId",
    ])),
    Rule("aws.transient", "transient", _AWS, codes=_codes([
        "RequestLimitExceeded", "ServerInternal", "ServiceUnavailable", "InternalError",
        "Unavailable", "InternalFailure", "Throttling", "ThrottlingException",
    ])),
    # GCP
    Rule("gcp.capacity", "capacity", _GCP, codes=_codes([
        "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "insufficientCapacity", "VM_MIN_COUNT_NOT_REACHED", "scale.up.error.out.of.resources",
    ])),
    Rule("gcp.quota", "quota", _GCP, codes=_codes([
        "QUOTA_EXCEEDED", "quotaExceeded", "scale.up.error.quota.exceeded",
        "scale.up.error.ip.space.exhausted",
    ])),
    Rule("gcp.permission_config", "permission_config", _GCP, codes=_codes([
        "IAM_PERMISSION_DENIED", "VPC_NOT_FOUND", "SUBNET_NOT_FOUND_FOR_VPC",
    ])),
    Rule("gcp.transient", "transient", _GCP, codes=_codes([
        "RESOURCE_NOT_READY", "RESOURCE_OPERATION_RATE_EXCEEDED", "503",
    ])),
    # Kubernetes (kubelet / container reasons; engine reasons from TGI's launcher)
    Rule("kubernetes.capacity.device_admission", "capacity", _K8S,
         codes=_codes(["UnexpectedAdmissionError"])),
    Rule("kubernetes.permission_config", "permission_config", _K8S, codes=_codes([
        "FailedMount", "CreateContainerConfigError", "InvalidImageName", "ImagePullBackOff",
        "ErrImagePull",
    ])),
    # Kubernetes API status reasons the adapters meet (RBAC, an invalid object), and the
    # adapter's own ClusterConfigError (no usable kubeconfig / EKS cluster for the location).
    Rule("kubernetes.api.permission_config", "permission_config", _K8S, codes=_codes([
        "Forbidden", "Unauthorized", "Invalid", "ClusterConfigError",
    ])),
    Rule("kubernetes.runtime", "runtime", _K8S, codes=_codes([
        "CrashLoopBackOff", "OOMKilled", "ContainerCannotRun", "Error", "Evicted",
    ])),
    Rule("engine.runtime.code", "runtime", None, codes=_codes([
        "ShardCannotStart", "DownloadError", "WebserverFailed",
    ])),
)

# -- tier 3: messages, any provider ----------------------------------------------------------
_MESSAGE: tuple[Rule, ...] = (
    Rule("message.quota", "quota", None, message=_msg(
        r"\bQuota '[^']*' exceeded", r"max node group size reached", r"\bexceeded quota:",
    )),
    Rule("message.capacity.unsupported_in_zone", "capacity", None, message=_msg(
        r"is not supported in your requested Availability Zone",
    ), persistent=True),
    Rule("message.capacity", "capacity", None, message=_msg(
        r"do not have sufficient .{0,80}capacity",
        r"Unable to provision requested ML compute capacity",
        r"does not have enough resources available to fulfill the request",
        r"is currently unavailable in the .{0,80}zone",
        r"\bInsufficient (?:[a-z0-9.-]+/[a-z0-9.-]+|cpu|memory|ephemeral-storage|pods)\b",
        r"requested number of devices unavailable",
    )),
    Rule("message.permission_config", "permission_config", None, message=_msg(
        r"is not found or access is unauthorized",
        r"didn't match (?:Pod's )?node (?:affinity|selector)",
        r"untolerated taint", r"that the pod didn't tolerate",
        r"unbound immediate PersistentVolumeClaims",
        r"Multi-Attach error",
    )),
    Rule("message.runtime.engine", "runtime", None, message=_msg(
        r"No available memory for the cache blocks",  # vLLM
        r"CUDA out of memory",
        r"Shard \d+ failed to start",  # TGI
        r"Not enough memory\. Please try to increase --mem-fraction-static",  # SGLang
    )),
    Rule("message.runtime", "runtime", None, message=_msg(
        r"did not pass the ping health check",  # SageMaker
        r"(?:Readiness|Startup|Liveness) probe failed",
        r"\bOOMKilled\b", r"exit code:? 137\b", r"CrashLoopBackOff",
    )),
)

# -- tier 4: codes that say how, not why -----------------------------------------------------
_GENERIC: tuple[Rule, ...] = (
    # TPU gRPC code 8 (RESOURCE_EXHAUSTED) is capacity unless a quota message said otherwise.
    Rule("gcp.tpu.resource_exhausted", "capacity", _GCP, codes=_codes(["8", "RESOURCE_EXHAUSTED"])),
    Rule("timeout.code", "timeout", None, codes=_Pattern(
        r".*(?:timeout|timed[ _]?out|deadline[ _]?exceeded).*")),
)

# -- tier 5: timeout wording, only when nothing stronger was seen -----------------------------
_TIMEOUT: tuple[Rule, ...] = (
    Rule("timeout.message", "timeout", None, message=_msg(
        r"timed out", r"deadline exceeded", r"\btimeout\b",
    )),
)

RULES: tuple[Rule, ...] = _REFINE + _CODE + _MESSAGE + _GENERIC + _TIMEOUT


def classify(provider: str, code: str | None, message: str | None) -> Classification:
    """Classify one failure. Never raises; anything unrecognized is `unknown`."""
    p = (provider or "").strip().lower()
    c = (code or "").strip()
    m = (message or "")[:_MAX_MESSAGE_CHARS]
    if not c and not m.strip():
        return Classification("unknown", "no_signal")
    for rule in RULES:
        if rule.codes is not None and not c:
            continue
        if rule.matches(p, c, m):
            return Classification(rule.failure_class, rule.name, persistent=rule.persistent,
                                  is_failure=rule.is_failure)
    return Classification("unknown", "unmatched")
