"""Wiring: the one place that builds adapters from settings. Everything is lazy, so a cold start
pays only for what its first request uses (the authorizer creates no client but DynamoDB's).
Tests and the local stack build a `Container` with their own settings/endpoints. The provider
adapters' wiring is in `bootstrap/providers.py`."""

from __future__ import annotations

import threading
from functools import cached_property
from typing import TYPE_CHECKING, Any

from infercrane.bootstrap.clients import LazyClient
from infercrane.settings import Settings, get_settings

if TYPE_CHECKING:
    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.cache import DynamoCacheStore
    from infercrane.adapters.dynamo.capacity import DynamoCapacityStore
    from infercrane.adapters.dynamo.directory import DynamoDirectoryStore
    from infercrane.adapters.dynamo.executions import DynamoExecutionStore
    from infercrane.adapters.dynamo.observations import DynamoObservationStore
    from infercrane.adapters.dynamo.revisions import DynamoRevisionStore
    from infercrane.adapters.dynamo.trace_builds import DynamoTraceBuildStore
    from infercrane.adapters.dynamo.traces import DynamoTraceStore
    from infercrane.adapters.s3_documents import S3DocumentStore
    from infercrane.adapters.secrets_manager import SecretsManagerKeyringStore
    from infercrane.adapters.segments.store import SegmentObservationStore
    from infercrane.adapters.sqs_admin import SqsQueueAdmin
    from infercrane.adapters.sqs_transport import SqsTransport
    from infercrane.domain.cache import CacheService, CacheSweeper
    from infercrane.domain.capacity import CapacityService
    from infercrane.domain.capture import CaptureService
    from infercrane.domain.dlq import DlqService
    from infercrane.domain.execution import ExecutionService
    from infercrane.domain.imports import ImportService
    from infercrane.domain.migration import ObservationMigration
    from infercrane.domain.prefetch import PrefetchService
    from infercrane.domain.providers.runner import AdapterRunner
    from infercrane.domain.replay import TraceService
    from infercrane.domain.tenancy import Authenticator, TenancyService
    from infercrane.domain.work import WorkMeter
    from infercrane.ports.signing import EvidenceSigner
    from infercrane.ports.transport import MessageTransport


class Container:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, service: str) -> Any:
        """A botocore client, shared (clients are thread-safe) and built only when first called:
        an adapter wired with an EC2 or SQS client pays 100-250 ms to create it only if the
        message in hand needs it (make bench's cold starts)."""
        with self._lock:
            if service not in self._clients:
                self._clients[service] = LazyClient(lambda: self._new_client(service))
            return self._clients[service]

    def _new_client(self, service: str) -> Any:
        from infercrane.adapters.aws_session import shared_session

        return shared_session().create_client(
            service,
            region_name=self.settings.region,
            endpoint_url=self.settings.aws_endpoint_url,
        )

    @cached_property
    def dynamo(self) -> DynamoConfig:
        # pynamodb (~20 ms of imports) loads with the first DynamoDB store, not with the container:
        # a function whose first call needs no table (admin's DLQ routes) never loads it.
        from infercrane.adapters.dynamo.base import DynamoConfig

        return DynamoConfig(region=self.settings.region, host=self.settings.aws_endpoint_url)

    # -- tenancy -------------------------------------------------------------------------------
    @cached_property
    def directory(self) -> DynamoDirectoryStore:
        from infercrane.adapters.dynamo.directory import DynamoDirectoryStore

        return DynamoDirectoryStore(self.settings.directory_table, self.dynamo)

    @cached_property
    def work_meter(self) -> WorkMeter | None:
        """The tenants' work buckets (domain/work.py); None when the stack sets no work rate."""
        if self.settings.work_rate_kib_s is None:
            return None
        from infercrane.adapters.dynamo.work import DynamoWorkBuckets
        from infercrane.domain.work import WorkMeter

        return WorkMeter(DynamoWorkBuckets(self.client("dynamodb"), self.settings.directory_table),
                         self.settings.work_rate_kib_s, self.settings.work_burst_kib)

    @cached_property
    def keyrings(self) -> SecretsManagerKeyringStore:
        from infercrane.adapters.secrets_manager import SecretsManagerKeyringStore

        return SecretsManagerKeyringStore(self.client("secretsmanager"),
                                          self.settings.secret_prefix,
                                          ttl_s=self.settings.secret_cache_ttl_s)

    @cached_property
    def tenancy(self) -> TenancyService:
        from infercrane.domain.tenancy import TenancyService

        usage = None
        if self.settings.usage_plan_id:
            from infercrane.adapters.apigateway_usage import ApiGatewayUsagePlans

            usage = ApiGatewayUsagePlans(self.client("apigateway"), self.settings.usage_plan_id)
        return TenancyService(self.directory, self.keyrings, usage)

    @cached_property
    def authenticator(self) -> Authenticator:
        from infercrane.domain.tenancy import Authenticator

        return Authenticator(self.directory)

    # -- operations ----------------------------------------------------------------------------
    @cached_property
    def queue_admin(self) -> SqsQueueAdmin:
        from infercrane.adapters.sqs_admin import SqsQueueAdmin

        s = self.settings
        queues = {
            "capture": s.capture_queue_url,
            "prefetch": s.prefetch_queue_url,
            "adapter-aws": s.adapter_aws_queue_url,
            "adapter-gcp": s.adapter_gcp_queue_url,
            "adapter-kubernetes": s.adapter_kubernetes_queue_url,
        }
        if s.trace_build_queue_url:
            queues["trace-build"] = s.trace_build_queue_url
        return SqsQueueAdmin(self.client("sqs"), queues)

    @cached_property
    def dlq(self) -> DlqService:
        from infercrane.domain.dlq import DlqService

        return DlqService(self.queue_admin)

    # -- artifact cache and prefetch (issue 5) -------------------------------------------------
    @cached_property
    def cache_store(self) -> DynamoCacheStore:
        from infercrane.adapters.dynamo.cache import DynamoCacheStore

        return DynamoCacheStore(self.settings.cache_table, self.dynamo)

    @cached_property
    def prefetch_queue(self) -> SqsTransport:
        from infercrane.adapters.sqs_transport import SqsTransport

        return SqsTransport(self.client("sqs"), self.settings.prefetch_queue_url)

    @cached_property
    def adapter_transports(self) -> dict[str, MessageTransport]:
        from infercrane.adapters.sqs_transport import SqsTransport

        s = self.settings
        transports: dict[str, MessageTransport] = {
            "aws": SqsTransport(self.client("sqs"), s.adapter_aws_queue_url),
            "gcp": SqsTransport(self.client("sqs"), s.adapter_gcp_queue_url),
            "kubernetes": SqsTransport(self.client("sqs"), s.adapter_kubernetes_queue_url)}
        if s.adapter_gcp_pubsub_topic:
            transports["gcp"] = self._pubsub_transport(s.adapter_gcp_pubsub_topic)
        return transports

    def _pubsub_transport(self, topic: str) -> MessageTransport:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        from infercrane.adapters.gce import workload_identity_credentials
        from infercrane.adapters.pubsub_transport import PubSubTransport

        scopes = ("https://www.googleapis.com/auth/pubsub",)
        config = self.settings.gcp_credentials_config
        creds = (workload_identity_credentials(config, scopes) if config
                 else google.auth.default(scopes=list(scopes))[0])
        return PubSubTransport(AuthorizedSession(creds), topic)

    @cached_property
    def cache(self) -> CacheService:
        from infercrane.domain.cache import CacheService

        return CacheService(self.cache_store)

    @cached_property
    def prefetch(self) -> PrefetchService:
        from infercrane.domain.prefetch import PrefetchService

        return PrefetchService(self.cache_store, self.prefetch_queue, self.adapter_transports)

    @cached_property
    def cache_sweeper(self) -> CacheSweeper:
        from infercrane.domain.cache import CacheSweeper

        return CacheSweeper(self.cache_store, self.prefetch)

    # -- capability areas add their stores and services below ----------------------------------
    # -- capacity intelligence -----------------------------------------------------------------
    @cached_property
    def capacity_store(self) -> DynamoCapacityStore:
        from infercrane.adapters.dynamo.capacity import DynamoCapacityStore

        return DynamoCapacityStore(self.settings.capacity_table, self.dynamo)

    @cached_property
    def capacity(self) -> CapacityService:
        from infercrane.domain.capacity import CapacityService

        # Marks younger than 30 s stay dirty: the hour index (a GSI) may still be catching up.
        return CapacityService(self.capacity_store, settle_ms=30_000)

    # -- capture (issue 3; docs/capture.md) ----------------------------------------------------
    @cached_property
    def observations(self) -> SegmentObservationStore:
        from infercrane.adapters.segments.store import SegmentObservationStore

        s = self.settings
        return SegmentObservationStore(self.client("s3"), self.client("dynamodb"),
                                       s.documents_bucket, s.observations_table, s.retention_days,
                                       legacy=lambda: self.legacy_observations)

    @cached_property
    def legacy_observations(self) -> DynamoObservationStore:
        """Observations as one item each, as stored before segments: read by the migration
        (`infercrane admin migrate-observations`), deleted by every deletion until their TTL."""
        from infercrane.adapters.dynamo.observations import DynamoObservationStore

        return DynamoObservationStore(self.settings.observations_table, self.dynamo,
                                      self.settings.retention_days)

    @cached_property
    def observation_migration(self) -> ObservationMigration:
        from infercrane.domain.migration import ObservationMigration

        return ObservationMigration(self.legacy_observations, self.observations)

    @cached_property
    def capture(self) -> CaptureService:
        from infercrane.domain.capture import CaptureService

        return CaptureService(self.observations, self.keyrings)

    @cached_property
    def imports(self) -> ImportService:
        from infercrane.adapters.dynamo.imports import DynamoImportStore
        from infercrane.domain.imports import ImportService

        return ImportService(DynamoImportStore(self.settings.replay_table, self.dynamo),
                             self.observations)

    # -- provider adapters (issue 6; docs/adapters.md; built in bootstrap/providers.py) -------
    @cached_property
    def aws_adapter(self) -> AdapterRunner:
        from infercrane.bootstrap.providers import aws_adapter

        return aws_adapter(self)

    @cached_property
    def gcp_adapter(self) -> AdapterRunner:
        from infercrane.bootstrap.providers import gcp_adapter

        return gcp_adapter(self)

    @cached_property
    def kubernetes_adapter(self) -> AdapterRunner:
        from infercrane.bootstrap.providers import kubernetes_adapter

        return kubernetes_adapter(self)

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
    def signer(self) -> EvidenceSigner:
        from infercrane.adapters.dsse import KmsEvidenceSigner

        if not self.settings.signing_key_id:
            raise RuntimeError("invalid or missing settings: INFERCRANE_SIGNING_KEY_ID")
        return KmsEvidenceSigner(self.client("kms"), self.settings.signing_key_id)

    @cached_property
    def replay(self) -> TraceService:
        from infercrane.adapters.sqs_transport import SqsTransport
        from infercrane.domain.replay import TraceService

        queue = self.settings.trace_build_queue_url
        return TraceService(self.observations, self.traces, self.documents,
                            builds=self.trace_builds if queue else None,
                            build_queue=SqsTransport(self.client("sqs"), queue) if queue else None,
                            sync_limit=self.settings.trace_sync_limit,
                            signer=lambda: self.signer)

    @cached_property
    def trace_builds(self) -> DynamoTraceBuildStore:
        from infercrane.adapters.dynamo.trace_builds import DynamoTraceBuildStore

        return DynamoTraceBuildStore(self.settings.replay_table, self.dynamo)

    # -- replay execution (issue 8; docs/execution.md) -----------------------------------------
    @cached_property
    def revisions(self) -> DynamoRevisionStore:
        from infercrane.adapters.dynamo.revisions import DynamoRevisionStore

        return DynamoRevisionStore(self.settings.replay_table, self.dynamo)

    @cached_property
    def execution_store(self) -> DynamoExecutionStore:
        from infercrane.adapters.dynamo.executions import DynamoExecutionStore

        return DynamoExecutionStore(self.settings.replay_table, self.dynamo)

    @cached_property
    def executions(self) -> ExecutionService:
        from infercrane.clock import utcnow
        from infercrane.domain.execution import ExecutionService

        return ExecutionService(self.revisions, self.execution_store, utcnow,
                                signer=lambda: self.signer)


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
