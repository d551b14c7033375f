"""Ports of the provider adapters.

`ProviderAdapter` is what each SDK adapter (`adapters/ec2.py`, `adapters/gce.py`,
`adapters/kubernetes_pvc.py`) implements: it fetches and mutates provider resources and returns
them in the provider's own JSON shape; the pure rules in `domain/providers/<provider>.py` decide
what they mean. Provider failures surface as `ProviderCallFailed` (raw code/message kept for the
capacity classifier).

`PrefetchRequests` and `CacheReporter` are the slices of the prefetch/cache services
(`infercrane.domain.prefetch.PrefetchService`, `infercrane.domain.cache.CacheService`) the runner
uses; `Rechecks` schedules a later look at a resource that is still being prepared.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from infercrane.domain.providers.message import Target
    from infercrane.domain.providers.model import Assessment, Verdict


class ProviderAdapter(Protocol):
    provider: str

    def describe_source(self, target: Target) -> dict[str, Any] | None:
        """The source artifact (EBS snapshot, GCE snapshot/image, VolumeSnapshot); None if absent."""

    def find(self, target: Target) -> dict[str, Any] | None:
        """The resource this prefetch made earlier (by prefetch-key tag or deterministic name)."""

    def create(self, target: Target, source: dict[str, Any]) -> dict[str, Any] | None:
        """Create the resource idempotently (ClientToken / requestId / deterministic name);
        an already-existing resource with the deterministic name is returned, not an error.
        None: not yet, the provider is still preparing the verified source (AWS: Fast Snapshot
        Restore being enabled); the runner re-checks later, as for a resource still preparing."""

    def describe(self, target: Target, resource_id: str) -> dict[str, Any] | None: ...

    def delete(self, target: Target, resource_id: str) -> None:
        """Delete; the runner calls it only for resources `owned` by the target's prefetch key."""

    def facts(self, target: Target, resource: dict[str, Any]) -> dict[str, str]:
        """Auxiliary state the rules need (AWS: Fast Snapshot Restore's state, after disabling
        it once the volume left `creating`; Kubernetes: the storage class's volumeBindingMode)."""


class ProviderRules(Protocol):
    provider: str

    def check_source(self, source: dict[str, Any] | None, target: Target) -> Verdict: ...

    def resource_id(self, resource: dict[str, Any]) -> str: ...

    def owned(self, resource: dict[str, Any], target: Target) -> bool: ...

    def assess(self, resource: dict[str, Any], target: Target,
               facts: dict[str, str]) -> Assessment: ...

    def plan(self, resource: dict[str, Any], target: Target) -> dict[str, Any]: ...


class PrefetchRequests(Protocol):
    def get(self, tenant: str, request_id: str) -> Any: ...

    def transition(self, tenant: str, request_id: str, to_status: str, *,
                   reason: str | None = None) -> Any: ...

    def record_resource(self, tenant: str, request_id: str, key: str, value: str) -> str:
        """Set-if-absent; returns the value stored (an earlier writer's value wins)."""


class CacheReporter(Protocol):
    def report(self, tenant: str, model: str, adapter: str, location: str, state: str,
               evidence: dict[str, str], observed_at: datetime,
               ttl_seconds: int | None = None) -> Any: ...


class Rechecks(Protocol):
    def schedule(self, body: Mapping[str, Any], delay_s: int) -> None:
        """Deliver `body` to the same adapter again after `delay_s` seconds (<= 900)."""
