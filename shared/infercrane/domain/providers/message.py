"""The adapter queue message (`infercrane.prefetch/v1`) and the deterministic names derived
from it. Every provider resource is named/tagged from one prefetch key, so two deliveries of the
same prefetch (or two different messages for it) find the same resource instead of making another."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from infercrane.domain.validation import DIGEST_PATTERN

SCHEMA = "infercrane.prefetch/v1"
Provider = Literal["aws", "gcp", "kubernetes"]


class AdapterMessage(BaseModel):
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True, extra="ignore")

    schema_: Literal["infercrane.prefetch/v1"] = Field(alias="schema")
    action: Literal["prefetch", "release"]
    tenant: str = Field(min_length=1, max_length=64)
    request_id: str = Field(min_length=1, max_length=128)
    model: str = Field(pattern=DIGEST_PATTERN)
    adapter: Provider
    location: str = Field(min_length=1, max_length=253)
    source: str = Field(min_length=1, max_length=1024)
    attempt: int = Field(default=1, ge=0, le=10_000)

    def target(self) -> Target:
        return Target.of(self.tenant, self.request_id, self.model, self.adapter, self.location,
                         self.source)

    def next_attempt(self) -> dict[str, object]:
        """The body of the re-check message: the same request, one attempt later."""
        body = self.model_dump(by_alias=True)
        body["attempt"] = self.attempt + 1
        return body


@dataclass(frozen=True)
class Target:
    tenant: str
    request_id: str
    model: str
    adapter: str
    location: str
    source: str
    key: str  # the prefetch key: tags/labels the resource and names it

    @classmethod
    def of(cls, tenant: str, request_id: str, model: str, adapter: str, location: str,
           source: str) -> Target:
        # Keyed on what the prefetch *is* (tenant, digest, adapter, location), not on the message
        # or request id: a second request for the same thing finds the first one's resource.
        # The tenant is part of it, so one tenant's release can never remove another's copy.
        key = hashlib.sha256(f"{tenant}|{model}|{adapter}|{location}".encode()).hexdigest()[:40]
        return cls(tenant, request_id, model, adapter, location, source, key)

    @property
    def name(self) -> str:
        """Deterministic resource name: valid for GCE disks and Kubernetes objects (RFC 1035
        label, <= 63 chars, starts with a letter)."""
        return f"icm-{self.key}"

    @property
    def client_token(self) -> str:
        """EC2 ClientToken (<= 64 ASCII characters)."""
        return f"icm-{self.key}"

    def request_uuid(self, operation: str = "insert") -> str:
        """GCE `requestId` (a UUID): the same for every delivery of one request's operation, so
        GCE deduplicates a retried call; a later request (after a release) gets a new one."""
        seed = f"{self.key}|{self.request_id}|{operation}".encode()
        return str(uuid.UUID(hex=hashlib.sha256(seed).hexdigest()[:32]))

    @property
    def digest_hex(self) -> str:
        return self.model.split(":", 1)[1]

    def snapshot_ref(self) -> tuple[str | None, str]:
        """Kubernetes source: `name` or `namespace/name` of a VolumeSnapshot."""
        namespace, _, name = self.source.rpartition("/")
        return (namespace or None), name

    def split_location(self) -> tuple[str, str]:
        """Kubernetes `cluster/namespace`."""
        cluster, _, namespace = self.location.partition("/")
        return cluster, namespace
