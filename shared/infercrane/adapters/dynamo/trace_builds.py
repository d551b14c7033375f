"""DynamoDB adapter for asynchronous trace builds in the ReplayTable.

pk = "<tenant>", sk = "BUILD#<build id>": the build's request, status and progress as one JSON
text attribute (a few hundred bytes), read with one GetItem and written in place as it runs.
A finished build (succeeded or failed) also carries `finished`, and every write is conditional on
its absence: a second delivery of the build's message still running never turns a finished
build back into a running one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pynamodb.attributes import BooleanAttribute, UnicodeAttribute
from pynamodb.exceptions import PutError, PynamoDBException
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind
from infercrane.errors import DependencyUnavailable

SK_PREFIX = "BUILD#"
FINISHED = ("succeeded", "failed")


class BuildItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    build = UnicodeAttribute()
    finished = BooleanAttribute(null=True)


class DynamoTraceBuildStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(BuildItem, table_name, config)

    def put_build(self, tenant: str, build: Mapping[str, Any]) -> bool:
        item = self._item(tenant, SK_PREFIX + str(build["build_id"]),
                          build=json.dumps(build, separators=(",", ":")),
                          finished=True if build.get("status") in FINISHED else None)
        try:
            item.save(condition=self._item.finished.does_not_exist())
        except PutError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise DependencyUnavailable("The trace table is unavailable.") from exc
        except PynamoDBException as exc:
            raise DependencyUnavailable("The trace table is unavailable.") from exc
        return True

    def get_build(self, tenant: str, build_id: str) -> dict[str, Any] | None:
        try:
            item = self._item.get(tenant, SK_PREFIX + build_id)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The trace table is unavailable.") from exc
        build: dict[str, Any] = json.loads(item.build)
        return build
