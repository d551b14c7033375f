"""Which providers a qualification run is configured for (the environment the package docstring
lists), whether it has credentials, and the production adapter and rules for each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercrane.domain.providers.message import Target

PROVIDERS = ("aws", "gcp", "kubernetes")
TENANT_PREFIX = "qualify-"
DEFAULT_JOURNAL = Path(".qualify") / "provider-resources.json"
NEEDS = ("provider qualification skipped: needs credentials and a target — set INFERCRANE_QUALIFY_MODEL "
         "plus AWS (INFERCRANE_QUALIFY_AWS_SNAPSHOT, INFERCRANE_QUALIFY_AWS_AZ, AWS credentials), GCP "
         "(INFERCRANE_QUALIFY_GCP_PROJECT/_ZONE/_SNAPSHOT, ADC or _GCP_CREDENTIALS_CONFIG) or Kubernetes "
         "(INFERCRANE_QUALIFY_KUBECONFIG/_K8S_NAMESPACE/_K8S_VOLUMESNAPSHOT); see docs/qualification.md")


@dataclass(frozen=True)
class ProviderTarget:
    """What one provider's scenario prefetches: `source` into `location` (the adapter message's
    fields), `repeats` times. `options` holds the provider's client settings."""

    provider: str
    model: str
    location: str
    source: str
    repeats: int
    options: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def region(self) -> str:
        return self.location[:-1]

    def targets(self, run_id: str) -> list[Target]:
        # One tenant per repetition: each gets its own prefetch key, so no repetition can find
        # (or be deduplicated into, via ClientToken/requestId) another one's resource.
        return [Target.of(f"{TENANT_PREFIX}{run_id}-{i}", f"{TENANT_PREFIX}{run_id}-{i}",
                          self.model, self.provider, self.location, self.source)
                for i in range(self.repeats)]


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name) or default)
    except ValueError:
        return default


def configured(env: Mapping[str, str]) -> dict[str, ProviderTarget]:
    """The providers whose target is fully configured (credentials are checked separately)."""
    model = env.get("INFERCRANE_QUALIFY_MODEL", "")
    if not model:
        return {}
    repeats = max(1, int(_number(env, "INFERCRANE_QUALIFY_REPEATS", 5)))
    opt = {k: env[k] for k in env if k.startswith("INFERCRANE_QUALIFY_") and env[k]}
    out: dict[str, ProviderTarget] = {}
    if env.get("INFERCRANE_QUALIFY_AWS_SNAPSHOT") and env.get("INFERCRANE_QUALIFY_AWS_AZ"):
        out["aws"] = ProviderTarget("aws", model, env["INFERCRANE_QUALIFY_AWS_AZ"],
                                    env["INFERCRANE_QUALIFY_AWS_SNAPSHOT"], repeats, opt)
    if all(env.get(f"INFERCRANE_QUALIFY_GCP_{k}") for k in ("PROJECT", "ZONE", "SNAPSHOT")):
        project, snap = env["INFERCRANE_QUALIFY_GCP_PROJECT"], env["INFERCRANE_QUALIFY_GCP_SNAPSHOT"]
        source = snap if snap.startswith("projects/") else f"projects/{project}/global/snapshots/{snap}"
        out["gcp"] = ProviderTarget("gcp", model, env["INFERCRANE_QUALIFY_GCP_ZONE"], source,
                                    repeats, opt)
    if env.get("INFERCRANE_QUALIFY_KUBECONFIG") and env.get("INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT"):
        cluster = env.get("INFERCRANE_QUALIFY_K8S_CONTEXT") or "current"
        namespace = env.get("INFERCRANE_QUALIFY_K8S_NAMESPACE") or "default"
        out["kubernetes"] = ProviderTarget("kubernetes", model, f"{cluster}/{namespace}",
                                           env["INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT"], repeats, opt)
    return out


def missing_credentials(t: ProviderTarget) -> str | None:
    """What the provider still needs before it can run, or None."""
    o = t.options
    if t.provider == "aws":
        try:
            import boto3

            if boto3.session.Session().get_credentials() is not None:
                return None
        except Exception:  # noqa: S110 - any failure means: no usable credentials
            pass
        return "AWS credentials (the standard AWS chain)"
    if t.provider == "gcp":
        if o.get("INFERCRANE_QUALIFY_GCP_ENDPOINT") or o.get("INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG"):
            return None
        try:
            import google.auth

            google.auth.default()
            return None
        except Exception:
            return "Application Default Credentials or INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG"
    if not Path(o.get("INFERCRANE_QUALIFY_KUBECONFIG", "")).is_file():
        return "a readable kubeconfig file in INFERCRANE_QUALIFY_KUBECONFIG"
    return None


def build(t: ProviderTarget) -> tuple[Any, Any]:
    """The production adapter and rules for `t`, made with the same constructors and arguments
    `infercrane.bootstrap.Container.<provider>_adapter` uses; only the client/credential source
    differs (a local AWS profile, ADC, a kubeconfig file instead of the stack's settings)."""
    o = t.options
    if t.provider == "aws":
        import boto3

        from infercrane.adapters.ec2 import Ec2Adapter
        from infercrane.domain.providers.aws import AwsRules

        kms = o.get("INFERCRANE_QUALIFY_AWS_KMS_KEY_ID")
        client = boto3.session.Session(region_name=t.region).client("ec2")
        return (Ec2Adapter(client, kms_key_id=kms),
                AwsRules(kms, o.get("INFERCRANE_QUALIFY_AWS_SNAPSHOT_OWNER")))
    if t.provider == "gcp":
        from infercrane.adapters.gce import GceAdapter, disks_clients, workload_identity_credentials
        from infercrane.domain.providers.gcp import GcpRules

        endpoint = o.get("INFERCRANE_QUALIFY_GCP_ENDPOINT")
        config = o.get("INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG")
        creds = workload_identity_credentials(config) if config and not endpoint else None
        disks, snapshots, images = disks_clients(endpoint, creds)
        return (GceAdapter(disks, snapshots, images, o["INFERCRANE_QUALIFY_GCP_PROJECT"],
                           o.get("INFERCRANE_QUALIFY_GCP_DISK_TYPE") or "pd-balanced"),
                GcpRules())
    from infercrane.adapters.kubernetes_pvc import KubernetesPvcAdapter
    from infercrane.domain.providers.kubernetes import KubernetesRules

    kubeconfig = o["INFERCRANE_QUALIFY_KUBECONFIG"]
    context = o.get("INFERCRANE_QUALIFY_K8S_CONTEXT")
    clients: dict[str, Any] = {}

    def client_for(cluster: str) -> Any:
        # The location's cluster part names the kubeconfig context; one ApiClient per run.
        if cluster not in clients:
            from kubernetes import config as k8s_config

            clients[cluster] = k8s_config.new_client_from_config(config_file=kubeconfig,
                                                                 context=context)
        return clients[cluster]

    return (KubernetesPvcAdapter(client_for,
                                 storage_class=o.get("INFERCRANE_QUALIFY_K8S_STORAGE_CLASS")),
            KubernetesRules())

