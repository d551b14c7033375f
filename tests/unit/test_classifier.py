"""Every code and message listed in provider-errors.md, one row each, plus the precedence rules."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infercrane.domain.classifier import (
    CLASSIFIER_VERSION,
    FAILURE_CLASSES,
    RULES,
    Classification,
    classify,
)

# (provider, code, message, expected class)
AWS_CASES = [
    ("aws", "InsufficientVolumeCapacity", "There is currently insufficient capacity to serve the "
     "request. Try again at a later time or in a different availability zone.", "capacity"),
    *[("aws", c, None, "capacity") for c in [
        "InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacityOnHost",
        "InsufficientReservedInstanceCapacity", "InsufficientCapacity", "UnfulfillableCapacity",
        "ReservationCapacityExceeded", "SpotMaxPriceTooLow", "Server.InsufficientInstanceCapacity",
        "Server.SpotInstanceTermination", "Server.SpotInstanceShutdown", "CapacityError",
        "Unsupported"]],
    ("aws", None, "Unable to provision requested ML compute capacity. Please retry using a different "
     "ML instance type.", "capacity"),
    ("aws", None, "We currently do not have sufficient inf2.24xlarge capacity in zones with support "
     "for 'gp3' volumes. Our system will be working on provisioning additional capacity.", "capacity"),
    ("aws", None, "Your requested instance type (p4d.24xlarge) is not supported in your requested "
     "Availability Zone (us-east-1e).", "capacity"),
    *[("aws", c, None, "quota") for c in [
        "VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded",
        "MaxSpotFleetRequestCountExceeded", "VolumeLimitExceeded", "MaxIOPSLimitExceeded",
        "TargetCapacityLimitExceededException", "InsufficientFreeAddressesInSubnet",
        "ResourceLimitExceeded"]],
    *[("aws", c, None, "permission_config") for c in [
        "UnauthorizedOperation", "AuthFailure", "Blocked", "OptInRequired", "InvalidParameterValue",
        "InvalidParameterCombination", "InvalidAMIID.NotFound", "InvalidSubnetID.NotFound",
        "AccessDenied", "AccessDeniedException", "ExpiredToken", "ExpiredTokenException",
        "RequestExpired", "InvalidClientTokenId"]],
    *[("aws", c, None, "transient") for c in [
        "RequestLimitExceeded", "ServerInternal", "ServiceUnavailable", "InternalError",
        "Unavailable", "InternalFailure"]],
    ("aws", None, "The primary container for production variant AllTraffic did not pass the ping "
     "health check. Please check CloudWatch logs for this endpoint.", "runtime"),
]

GCP_CASES = [
    *[("gcp", c, None, "capacity") for c in [
        "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "insufficientCapacity", "VM_MIN_COUNT_NOT_REACHED", "scale.up.error.out.of.resources", "8"]],
    ("gcp", None, "The zone 'projects/p/zones/us-central1-a' does not have enough resources available "
     "to fulfill the request. Try a different zone, or try again later.", "capacity"),
    ("gcp", None, "The a2-highgpu-1g machine type is currently unavailable in the us-central1-b zone.",
     "capacity"),
    *[("gcp", c, None, "quota") for c in [
        "QUOTA_EXCEEDED", "quotaExceeded", "scale.up.error.quota.exceeded",
        "scale.up.error.ip.space.exhausted"]],
    ("gcp", None, "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally.", "quota"),
    ("gcp", None, "Quota 'CPUS' exceeded. Limit: 24.0 in region us-west1.", "quota"),
    *[("gcp", c, None, "permission_config") for c in [
        "IAM_PERMISSION_DENIED", "VPC_NOT_FOUND", "SUBNET_NOT_FOUND_FOR_VPC"]],
    ("gcp", None, "The resource 'projects/p/global/images/x' is not found or access is unauthorized.",
     "permission_config"),
    *[("gcp", c, None, "transient") for c in [
        "RESOURCE_NOT_READY", "RESOURCE_OPERATION_RATE_EXCEEDED", "503"]],
    # documented ambiguous choices
    ("gcp", "UNSUPPORTED_OPERATION", "Instance was preempted during create.", "capacity"),
    ("gcp", "UNSUPPORTED_OPERATION", "The operation is not supported for this resource.",
     "permission_config"),
    ("gcp", "RESOURCE_NOT_FOUND", "The resource was not found.", "permission_config"),
]

K8S_CASES = [
    ("kubernetes", "FailedScheduling", "0/8 nodes are available: 8 Insufficient nvidia.com/gpu. "
     "preemption: 0/8 nodes are available: 8 No preemption victims found.", "capacity"),
    ("kubernetes", "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.", "capacity"),
    ("kubernetes", "Unschedulable", "0/3 nodes are available: 3 Insufficient memory.", "capacity"),
    ("kubernetes", "NotTriggerScaleUp", "pod didn't trigger scale-up: 2 Insufficient nvidia.com/gpu",
     "capacity"),
    ("kubernetes", "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached",
     "quota"),
    ("kubernetes", "UnexpectedAdmissionError", "Allocate failed due to requested number of devices "
     "unavailable for nvidia.com/gpu. Requested: 1, Available: 0", "capacity"),
    ("kubernetes", None, "Allocate failed due to requested number of devices unavailable for "
     "nvidia.com/gpu.", "capacity"),
    ("kubernetes", "FailedScheduling", "0/3 nodes are available: 3 node(s) didn't match Pod's node "
     "affinity/selector.", "permission_config"),
    ("kubernetes", "FailedScheduling", "0/3 nodes are available: 3 node(s) had untolerated taint "
     "{dedicated: infra}.", "permission_config"),
    ("kubernetes", "FailedScheduling", "0/3 nodes are available: pod has unbound immediate "
     "PersistentVolumeClaims.", "permission_config"),
    ("kubernetes", "FailedAttachVolume", "Multi-Attach error for volume \"pvc-1\" Volume is already "
     "used by pod(s) x", "permission_config"),
    *[("kubernetes", c, None, "permission_config") for c in [
        "FailedMount", "CreateContainerConfigError", "InvalidImageName", "ImagePullBackOff",
        "ErrImagePull"]],
    *[("kubernetes", c, None, "runtime") for c in [
        "CrashLoopBackOff", "OOMKilled", "ContainerCannotRun", "Error", "Evicted"]],
    ("kubernetes", "Terminated", "container exited with exit code 137", "runtime"),
    ("kubernetes", "Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503",
     "runtime"),
    ("kubernetes", "Unhealthy", "Startup probe failed: connection refused", "runtime"),
    # a pod still Pending on GPUs at its deadline is capacity, not timeout
    ("kubernetes", "ProgressDeadlineExceeded", "0/4 nodes are available: 4 Insufficient "
     "nvidia.com/gpu.", "capacity"),
    ("kubernetes", "ProgressDeadlineExceeded", "ReplicaSet has timed out progressing.", "timeout"),
    ("kubernetes", None, "operation timed out after 900s", "timeout"),
    # Kubernetes API status reasons met by the PVC adapter
    ("kubernetes", "Forbidden", 'persistentvolumeclaims "icm-1" is forbidden: exceeded quota: '
     "storage, requested: requests.storage=500Gi, used: requests.storage=1Ti, limited: "
     "requests.storage=1Ti", "quota"),
    ("kubernetes", "Forbidden", 'persistentvolumeclaims is forbidden: User "system:serviceaccount:'
     'infercrane:adapter" cannot create resource', "permission_config"),
    ("kubernetes", "Unauthorized", "Unauthorized", "permission_config"),
    ("kubernetes", "Invalid", "PersistentVolumeClaim is invalid: spec.accessModes", "permission_config"),
]

# Engine messages arrive through every adapter.
ENGINE_MESSAGES = [
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "Shard 0 failed to start",
    "Not enough memory. Please try to increase --mem-fraction-static.",
]
ENGINE_CASES = [
    *[(p, None, m, "runtime") for p in ("aws", "gcp", "kubernetes") for m in ENGINE_MESSAGES],
    *[(p, c, None, "runtime") for p in ("aws", "gcp", "kubernetes")
      for c in ("ShardCannotStart", "DownloadError", "WebserverFailed")],
]

ALL_CASES = AWS_CASES + GCP_CASES + K8S_CASES + ENGINE_CASES


@pytest.mark.parametrize(("provider", "code", "message", "expected"), ALL_CASES)
def test_classifies_every_listed_provider_signal(provider, code, message, expected):
    result = classify(provider, code, message)
    assert result.failure_class == expected, result.rule
    assert result.version == CLASSIFIER_VERSION
    assert result.rule


QUOTA_CODES = [(p, c) for p, c, m, k in ALL_CASES if k == "quota" and c and not m]


@pytest.mark.parametrize(("provider", "code"), QUOTA_CODES)
def test_quota_is_never_capacity_even_with_capacity_wording(provider, code):
    noisy = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu; zone does not have enough " \
            "resources available to fulfill the request"
    assert classify(provider, code, noisy).failure_class == "quota"


def test_aws_unsupported_is_structural_capacity():
    result = classify("aws", "Unsupported", "Your requested instance type (p4d.24xlarge) is not "
                      "supported in your requested Availability Zone (us-east-1e).")
    assert (result.failure_class, result.persistent) == ("capacity", True)
    assert classify("aws", "InsufficientInstanceCapacity", None).persistent is False


def test_triggered_scale_up_is_not_a_failure():
    result = classify("kubernetes", "TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1}]")
    assert result.is_failure is False
    assert result.failure_class != "capacity"


def test_codes_are_scoped_to_their_provider():
    # `Error` is a Kubernetes container reason; on AWS it means nothing specific.
    assert classify("kubernetes", "Error", None).failure_class == "runtime"
    assert classify("aws", "Error", None).failure_class == "unknown"
    assert classify("gcp", "InsufficientInstanceCapacity", None).failure_class == "unknown"


def test_missing_signal_is_unknown():
    assert classify("aws", None, None) == Classification("unknown", "no_signal")
    assert classify("aws", "  ", "   ").failure_class == "unknown"
    assert classify("aws", "SomethingNew", "never seen").rule == "unmatched"


def test_classification_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        classify("aws", "VcpuLimitExceeded", None).failure_class = "capacity"  # type: ignore[misc]


def test_rule_names_are_unique():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))


@given(provider=st.sampled_from(["aws", "gcp", "kubernetes", "other"]),
       code=st.one_of(st.none(), st.text(max_size=40)),
       message=st.one_of(st.none(), st.text(max_size=300)))
def test_classify_never_raises_and_returns_a_known_class(provider, code, message):
    result = classify(provider, code, message)
    assert result.failure_class in FAILURE_CLASSES
    assert result.version == CLASSIFIER_VERSION
