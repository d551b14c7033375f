"""DynamoDB adapter for execution evidence in the ReplayTable.

pk = "<tenant>", sk = "EXEC#<execution id>"; the evidence document is kept as JSON text (a few
KB: numbers stay exactly as measured, no Decimal round trip). Written once: a conditional put,
and a re-post is answered from what is stored.
"""

from __future__ import annotations

from pynamodb.attributes import UnicodeAttribute
from pynamodb.exceptions import PutError, PynamoDBException
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind
from infercrane.errors import DependencyUnavailable, IdempotencyConflict

SK_PREFIX = "EXEC#"


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


class DynamoExecutionStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(ExecutionItem, table_name, config)

    def put_execution(self, tenant: str, execution_id: str, digest: str, document: str,
                      recorded_at: str, attestation: str | None = None) -> bool:
        item = self._item(tenant, SK_PREFIX + execution_id, execution_id=execution_id,
                          digest=digest, recorded_at=recorded_at, document=document,
                          attestation=attestation)
        try:
            item.save(condition=self._item.sk.does_not_exist())
            return True
        except PutError as exc:
            if exc.cause_response_code != "ConditionalCheckFailedException":
                raise DependencyUnavailable("The replay store is unavailable.") from exc
        try:
            existing = self._item.get(tenant, SK_PREFIX + execution_id, consistent_read=True)
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        if existing.digest != digest:
            raise IdempotencyConflict("This execution id already holds different evidence.",
                                      field="execution_id")
        return False

    def get_execution(self, tenant: str, execution_id: str) -> str | None:
        try:
            item = self._item.get(tenant, SK_PREFIX + execution_id, consistent_read=True)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        return str(item.document)

    def get_attestation(self, tenant: str, execution_id: str) -> str | None:
        try:
            item = self._item.get(tenant, SK_PREFIX + execution_id, consistent_read=True)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        return None if item.attestation is None else str(item.attestation)
