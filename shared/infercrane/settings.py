"""Settings: one pydantic model, read from the environment once per cold start.

Every function receives the same variables (template.yaml `Globals`); a missing one fails loudly at
import rather than half-way through a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True)

    directory_table: str = Field(min_length=1)
    observations_table: str = Field(min_length=1)
    replay_table: str = Field(min_length=1)
    cache_table: str = Field(min_length=1)
    capacity_table: str = Field(min_length=1)
    documents_bucket: str = Field(min_length=1)
    secret_prefix: str = Field(min_length=1)
    capture_queue_url: str = Field(min_length=1)
    prefetch_queue_url: str = Field(min_length=1)
    adapter_aws_queue_url: str = Field(min_length=1)
    adapter_gcp_queue_url: str = Field(min_length=1)
    adapter_kubernetes_queue_url: str = Field(min_length=1)
    retention_days: int = Field(default=30, ge=1, le=400)
    region: str = Field(default="us-east-1", min_length=1)
    # Set only by the local stack (moto); in AWS the SDK's default endpoints are used.
    aws_endpoint_url: str | None = None
    # How long a tenant's HMAC secret is cached in a warm function before it is re-read.
    secret_cache_ttl_s: int = Field(default=300, ge=0, le=3600)
    # Provider adapters (docs/adapters.md). Unset expectations are not checked.
    aws_expected_kms_key_id: str | None = None
    aws_expected_snapshot_owner: str | None = None
    aws_fast_snapshot_restore: bool = False
    aws_volume_type: str = Field(default="gp3", min_length=1)
    adapter_recheck_delay_s: int = Field(default=30, ge=0, le=900)
    adapter_max_rechecks: int = Field(default=40, ge=1, le=1000)
    gcp_project: str | None = None
    gcp_disk_type: str = Field(default="pd-balanced", min_length=1)
    # When the GCP adapter runs as a Cloud Function, prefetch requests for it are published to
    # this Pub/Sub topic (projects/<project>/topics/<name>) instead of its SQS queue.
    adapter_gcp_pubsub_topic: str | None = Field(default=None, pattern=r"^projects/[^/]+/topics/[^/]+$")
    # Workload identity federation config (external_account JSON, inline or a file path).
    gcp_credentials_config: str | None = None
    # Local emulator only: Compute Engine REST endpoint (http://127.0.0.1:P).
    gcp_compute_endpoint: str | None = None
    # "kubeconfig" (Secrets Manager <secret_prefix>/kubeconfigs/<cluster>) or "eks" (IAM token).
    kubernetes_auth: str = Field(default="kubeconfig", pattern="^(kubeconfig|eks)$")
    # Local emulator only: one API server endpoint for every cluster name.
    kubernetes_endpoint: str | None = None
    kubernetes_storage_class: str | None = None
    # The tenant usage plan (template.yaml TenantUsagePlan): admin enrolls each tenant's usage
    # identifier in it. Unset locally, where the local gateway enforces the plan itself.
    usage_plan_id: str | None = None
    # Throttling by work (domain/work.py): KiB of request bodies a second per tenant and the
    # most at once (template.yaml TenantWorkRate/TenantWorkBurst). Unset: bodies are not charged.
    work_rate_kib_s: float | None = Field(default=None, gt=0)
    work_burst_kib: int = Field(default=10_240, ge=1)
    # The stack's asymmetric KMS key (template.yaml SigningKey): functions that store evidence
    # sign it. Unset, storing a trace or execution evidence fails loudly rather than unsigned.
    signing_key_id: str | None = None
    # Asynchronous trace builds (docs/trace.md): the build queue (unset: every build is
    # synchronous) and the most observations a window may hold to be built inside the request.
    trace_build_queue_url: str | None = None
    trace_sync_limit: int = Field(default=10_000, ge=1, le=100_000)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        values: dict[str, str] = {}
        for name in cls.model_fields:
            key = f"INFERCRANE_{name.upper()}"
            if key in env and env[key] != "":
                values[name] = env[key]
        if "region" not in values:
            region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
            if region:
                values["region"] = region
        if "aws_endpoint_url" not in values and env.get("AWS_ENDPOINT_URL"):
            values["aws_endpoint_url"] = env["AWS_ENDPOINT_URL"]
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            missing = ", ".join(
                f"INFERCRANE_{'.'.join(str(p) for p in e['loc']).upper()}" for e in exc.errors()
            )
            raise RuntimeError(f"invalid or missing settings: {missing}") from exc


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, validated on first use (a cold start)."""
    return Settings.from_env(os.environ)
