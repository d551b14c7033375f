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
    idempotency_table: str = Field(min_length=1)
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
