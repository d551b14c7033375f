"""Wiring: the one place that builds adapters from settings. Everything is lazy, so a cold start
pays only for what its first request uses (the authorizer never imports boto3, for example).
Tests and the local stack build a `Container` with their own settings/endpoints."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING, Any

from infercrane.adapters.dynamo.base import DynamoConfig
from infercrane.settings import Settings, get_settings

if TYPE_CHECKING:
    from infercrane.adapters.dynamo.directory import DynamoDirectoryStore
    from infercrane.adapters.secrets_manager import SecretsManagerKeyringStore
    from infercrane.adapters.sqs_admin import SqsQueueAdmin
    from infercrane.domain.dlq import DlqService
    from infercrane.domain.tenancy import TenancyService


class Container:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        """A boto3 client, created on first use and shared (clients are thread-safe)."""
        with self._lock:
            if service not in self._clients:
                import boto3

                self._clients[service] = boto3.session.Session().client(
                    service,
                    region_name=self.settings.region,
                    endpoint_url=self.settings.aws_endpoint_url,
                )
            return self._clients[service]

    @cached_property
    def dynamo(self) -> DynamoConfig:
        return DynamoConfig(region=self.settings.region, host=self.settings.aws_endpoint_url)

    # -- tenancy -------------------------------------------------------------------------------
    @cached_property
    def directory(self) -> DynamoDirectoryStore:
        from infercrane.adapters.dynamo.directory import DynamoDirectoryStore

        return DynamoDirectoryStore(self.settings.directory_table, self.dynamo)

    @cached_property
    def keyrings(self) -> SecretsManagerKeyringStore:
        from infercrane.adapters.secrets_manager import SecretsManagerKeyringStore

        return SecretsManagerKeyringStore(self.client("secretsmanager"),
                                          self.settings.secret_prefix,
                                          ttl_s=self.settings.secret_cache_ttl_s)

    @cached_property
    def tenancy(self) -> TenancyService:
        from infercrane.domain.tenancy import TenancyService

        return TenancyService(self.directory, self.keyrings)

    # -- operations ----------------------------------------------------------------------------
    @cached_property
    def queue_admin(self) -> SqsQueueAdmin:
        from infercrane.adapters.sqs_admin import SqsQueueAdmin

        s = self.settings
        return SqsQueueAdmin(self.client("sqs"), {
            "capture": s.capture_queue_url,
            "prefetch": s.prefetch_queue_url,
            "adapter-aws": s.adapter_aws_queue_url,
            "adapter-gcp": s.adapter_gcp_queue_url,
            "adapter-kubernetes": s.adapter_kubernetes_queue_url,
        })

    @cached_property
    def dlq(self) -> DlqService:
        from infercrane.domain.dlq import DlqService

        return DlqService(self.queue_admin)

    # -- capability areas add their stores and services below ----------------------------------

    # -- replay traces -------------------------------------------------------------------------
    @cached_property
    def traces(self) -> DynamoTraceStore:
        from infercrane.adapters.dynamo.traces import DynamoTraceStore

        return DynamoTraceStore(self.settings.replay_table, self.dynamo)

    @cached_property
    def documents(self) -> S3DocumentStore:
        from infercrane.adapters.s3_documents import S3DocumentStore

        return S3DocumentStore(self.client("s3"), self.settings.documents_bucket)

    @cached_property
    def replay(self) -> TraceService:
        from infercrane.domain.replay import TraceService

        # `observations` is the capture area's property; read by name so wiring order is free.
        observations = getattr(self, "observations")  # noqa: B009
        return TraceService(observations, self.traces, self.documents)


_container: Container | None = None
_container_lock = threading.Lock()


def get_container() -> Container:
    """The process-wide container (one per warm Lambda environment)."""
    global _container
    with _container_lock:
        if _container is None:
            _container = Container(get_settings())
        return _container


def reset_container(container: Container | None = None) -> None:
    """Replace the process-wide container (local stack and tests)."""
    global _container
    with _container_lock:
        _container = container
