"""DynamoDB adapter for execution evidence in the ReplayTable.

pk = "<tenant>", sk = "EXEC#<execution id>"; the evidence document is kept as JSON text (a few
KB: numbers stay exactly as measured, no Decimal round trip). Written once: a conditional put,
and a re-post is answered from what is stored. The gsi1 index lists a deployment's executions
newest first: gsi1pk = "<tenant>#EXECS#<deployment>", gsi1sk = "<recorded_at>#<execution id>".
"""

from __future__ import annotations

from pynamodb.attributes import UnicodeAttribute
from pynamodb.exceptions import PutError, PynamoDBException
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind, write_error
from infercrane.errors import DependencyUnavailable, IdempotencyConflict

SK_PREFIX = "EXEC#"


class ExecutionsByDeployment(GlobalSecondaryIndex["ExecutionItem"]):
    class Meta:
        index_name = "gsi1"
        projection = AllProjection()

    gsi1pk = UnicodeAttribute(hash_key=True)
    gsi1sk = UnicodeAttribute(range_key=True)


class ExecutionItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    execution_id = UnicodeAttribute()
    digest = UnicodeAttribute()
    recorded_at = UnicodeAttribute()
    document = UnicodeAttribute()
    # The service's signed statement about the document (a DSSE envelope, JSON text).
    attestation = UnicodeAttribute(null=True)
    # Absent on evidence stored before executions were listed by deployment.
    gsi1pk = UnicodeAttribute(null=True)
    gsi1sk = UnicodeAttribute(null=True)
    by_deployment = ExecutionsByDeployment()


class DynamoExecutionStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(ExecutionItem, table_name, config)

    def put_execution(self, tenant: str, execution_id: str, digest: str, document: str,
                      recorded_at: str, attestation: str | None = None,
                      deployment: str | None = None) -> bool:
        item = self._item(tenant, SK_PREFIX + execution_id, execution_id=execution_id,
                          digest=digest, recorded_at=recorded_at, document=document,
                          attestation=attestation)
        if deployment is not None:
            item.gsi1pk = f"{tenant}#EXECS#{deployment}"
            item.gsi1sk = f"{recorded_at}#{execution_id}"
        try:
            item.save(condition=self._item.sk.does_not_exist())
            return True
        except PutError as exc:
            if exc.cause_response_code != "ConditionalCheckFailedException":
                raise write_error(exc, "The replay store is unavailable.") from exc
        try:
            existing = self._item.get(tenant, SK_PREFIX + execution_id, consistent_read=True)
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        if existing.digest != digest:
            raise IdempotencyConflict("This execution id already holds different evidence.",
                                      field="execution_id")
        return False

    def _get(self, tenant: str, execution_id: str) -> ExecutionItem | None:
        try:
            return self._item.get(tenant, SK_PREFIX + execution_id, consistent_read=True)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc

    def get_execution(self, tenant: str, execution_id: str) -> str | None:
        item = self._get(tenant, execution_id)
        return None if item is None else str(item.document)

    def latest_execution_id(self, tenant: str, deployment: str) -> str | None:
        try:
            for item in self._item.by_deployment.query(f"{tenant}#EXECS#{deployment}",
                                                       scan_index_forward=False, limit=1,
                                                       page_size=1):
                return str(item.execution_id)
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        return None

    def get_attestation(self, tenant: str, execution_id: str) -> str | None:
        item = self._get(tenant, execution_id)
        return None if item is None or item.attestation is None else str(item.attestation)
