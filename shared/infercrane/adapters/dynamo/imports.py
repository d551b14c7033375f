"""DynamoDB adapter for import records in the ReplayTable.

pk = "<tenant>", sk = "IMPORT#<deployment>#<file sha256>": one GetItem; the record is stored as
JSON text (a closed, bounded shape checked by `domain/imports.ImportIn`). Conditional puts make
"first import wins" and "replace only what was read" hold under concurrent imports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pynamodb.attributes import UnicodeAttribute
from pynamodb.exceptions import PutError, PynamoDBException
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind, write_error
from infercrane.errors import DependencyUnavailable

SK_PREFIX = "IMPORT#"


class ImportItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    import_id = UnicodeAttribute()
    record = UnicodeAttribute()


def _sk(deployment: str, file_sha256: str) -> str:
    return f"{SK_PREFIX}{deployment}#{file_sha256}"


class DynamoImportStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(ImportItem, table_name, config)

    def get(self, tenant: str, deployment: str, file_sha256: str) -> dict[str, Any] | None:
        try:
            item = self._item.get(tenant, _sk(deployment, file_sha256), consistent_read=True)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        record: dict[str, Any] = json.loads(item.record)
        return record

    def put(self, tenant: str, record: Mapping[str, Any], replacing: str | None) -> bool:
        item = self._item(tenant, _sk(str(record["deployment"]), str(record["file_sha256"])),
                          import_id=str(record["import_id"]),
                          record=json.dumps(record, separators=(",", ":")))
        condition = (self._item.sk.does_not_exist() if replacing is None
                     else self._item.import_id == replacing)
        try:
            item.save(condition=condition)
        except PutError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise write_error(exc, "The replay store is unavailable.") from exc
        return True
