"""Wiring of the provider adapters (issue 6; docs/adapters.md): each provider's adapter and
rules, run by one `AdapterRunner` over the container's prefetch, cache and its recheck queue.
`Container.{aws,gcp,kubernetes}_adapter` build them here on first use."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from infercrane.bootstrap.clients import LazyClient

if TYPE_CHECKING:
    from infercrane.bootstrap import Container
    from infercrane.domain.providers.runner import AdapterRunner


def adapter_runner(container: Container, adapter: Any, rules: Any,
                   queue_url: str) -> AdapterRunner:
    """The runner of one provider's messages; rechecks are re-sent to `queue_url`."""
    from infercrane.adapters.sqs_recheck import SqsRechecks
    from infercrane.clock import utcnow
    from infercrane.domain.classifier import classify
    from infercrane.domain.providers.runner import AdapterRunner, RunnerPolicy

    s = container.settings
    return AdapterRunner(adapter, rules, container.prefetch, container.cache, classify, utcnow,
                         SqsRechecks(container.client("sqs"), queue_url),
                         RunnerPolicy(s.adapter_recheck_delay_s, s.adapter_max_rechecks))


def aws_adapter(container: Container) -> AdapterRunner:
    from infercrane.adapters.ec2 import Ec2Adapter
    from infercrane.domain.providers.aws import AwsRules

    s = container.settings
    ec2 = Ec2Adapter(container.client("ec2"), fast_snapshot_restore=s.aws_fast_snapshot_restore,
                     volume_type=s.aws_volume_type, kms_key_id=s.aws_expected_kms_key_id)
    rules = AwsRules(s.aws_expected_kms_key_id, s.aws_expected_snapshot_owner)
    return adapter_runner(container, ec2, rules, s.adapter_aws_queue_url)


def gcp_adapter(container: Container) -> AdapterRunner:
    from infercrane.adapters.gce import (
        GCE_CLIENTS,
        GceAdapter,
        compute_client,
        workload_identity_credentials,
    )
    from infercrane.domain.providers.gcp import GcpRules

    s = container.settings
    if not s.gcp_project:
        raise RuntimeError("invalid or missing settings: INFERCRANE_GCP_PROJECT")

    @cache
    def creds() -> Any:
        return (workload_identity_credentials(s.gcp_credentials_config)
                if s.gcp_credentials_config and not s.gcp_compute_endpoint else None)

    # Each client (with google-cloud-compute, ~0.3-2 s to import) is built on its first call:
    # a message that ends before any provider call (unknown or finished request) needs none.
    def lazy(kind: str) -> Any:
        return LazyClient(lambda: compute_client(kind, s.gcp_compute_endpoint, creds()))

    disks, snapshots, images = (lazy(kind) for kind in GCE_CLIENTS)
    gce = GceAdapter(disks, snapshots, images, s.gcp_project, s.gcp_disk_type)
    return adapter_runner(container, gce, GcpRules(), s.adapter_gcp_queue_url)


def kubernetes_adapter(container: Container) -> AdapterRunner:
    from infercrane.adapters.kubernetes_pvc import ClusterClients, KubernetesPvcAdapter
    from infercrane.domain.providers.kubernetes import KubernetesRules

    s = container.settings
    auth_eks = s.kubernetes_auth == "eks"
    clusters = ClusterClients(endpoint=s.kubernetes_endpoint, auth=s.kubernetes_auth,
                              secrets=container.client("secretsmanager"),
                              secret_prefix=s.secret_prefix,
                              eks=container.client("eks") if auth_eks else None,
                              sts=container.client("sts") if auth_eks else None)
    pvcs = KubernetesPvcAdapter(clusters, storage_class=s.kubernetes_storage_class)
    return adapter_runner(container, pvcs, KubernetesRules(), s.adapter_kubernetes_queue_url)
