"""DynamoDB adapter for trace headers in the ReplayTable.

pk = "<tenant>", sk = "TRACE#<digest>": one GetItem finds a tenant's trace, and another tenant's
key never matches. The gsi1 index lists a deployment's traces newest first:
gsi1pk = "<tenant>#TRACES#<deployment>", gsi1sk = "<created_at>#<digest>".
(Revisions "REV#..." and executions "EXEC#..." share the table under the same pk.)
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from pynamodb.attributes import UnicodeAttribute
from pynamodb.exceptions import PutError, PynamoDBException
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind
from infercrane.errors import DependencyUnavailable, InvalidInput
from infercrane.ports.traces import HeaderPage

SK_PREFIX = "TRACE#"


class TracesByDeployment(GlobalSecondaryIndex["TraceItem"]):
    class Meta:
        index_name = "gsi1"
        projection = AllProjection()

    gsi1pk = UnicodeAttribute(hash_key=True)
    gsi1sk = UnicodeAttribute(range_key=True)


class TraceItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    gsi1pk = UnicodeAttribute()
    gsi1sk = UnicodeAttribute()
    deployment = UnicodeAttribute()
    digest = UnicodeAttribute()
    created_at = UnicodeAttribute()
    # The header as JSON text: numbers stay exactly as built (no Decimal round trip).
    header = UnicodeAttribute()
    by_deployment = TracesByDeployment()


def _listing_pk(tenant: str, deployment: str) -> str:
    return f"{tenant}#TRACES#{deployment}"


def _encode_token(gsi1sk: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": gsi1sk}).encode()).decode().rstrip("=")


def _decode_token(token: str) -> str:
    try:
        padded = token + "=" * (-len(token) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["after"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        value = None
    if not isinstance(value, str) or "#sha256:" not in value:
        raise InvalidInput("The next_token is not one this service issued.", field="next_token")
    return value


class DynamoTraceStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(TraceItem, table_name, config)

    def put_header(self, tenant: str, header: Mapping[str, Any]) -> bool:
        digest, created_at = str(header["digest"]), str(header["created_at"])
        item = self._item(
            tenant, f"{SK_PREFIX}{digest}",
            gsi1pk=_listing_pk(tenant, str(header["deployment"])),
            gsi1sk=f"{created_at}#{digest}",
            deployment=str(header["deployment"]), digest=digest, created_at=created_at,
            header=json.dumps(header, separators=(",", ":")),
        )
        try:
            item.save(condition=self._item.sk.does_not_exist())
        except PutError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise DependencyUnavailable("The trace table is unavailable.") from exc
        return True

    def get_header(self, tenant: str, digest: str) -> dict[str, Any] | None:
        try:
            item = self._item.get(tenant, f"{SK_PREFIX}{digest}")
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The trace table is unavailable.") from exc
        header: dict[str, Any] = json.loads(item.header)
        return header

    def list_headers(self, tenant: str, deployment: str, limit: int,
                     next_token: str | None = None) -> HeaderPage:
        pk = _listing_pk(tenant, deployment)
        start = None
        if next_token:
            after = _decode_token(next_token)
            start = {"gsi1pk": {"S": pk}, "gsi1sk": {"S": after}, "pk": {"S": tenant},
                     "sk": {"S": SK_PREFIX + after.split("#", 1)[1]}}
        try:
            # One more than asked: whether a next page exists, without an empty last page.
            items = list(self._item.by_deployment.query(
                pk, scan_index_forward=False, limit=limit + 1, page_size=limit + 1,
                last_evaluated_key=start))
        except PynamoDBException as exc:
            raise DependencyUnavailable("The trace table is unavailable.") from exc
        page = items[:limit]
        token = _encode_token(page[-1].gsi1sk) if len(items) > limit else None
        return HeaderPage([json.loads(i.header) for i in page], token)

    def find_by_prefix(self, tenant: str, digest_prefix: str, limit: int) -> list[str]:
        # Headers sort by digest under the tenant: one Query with begins_with, `limit` items.
        try:
            items = self._item.query(tenant, self._item.sk.startswith(SK_PREFIX + digest_prefix),
                                     limit=limit, attributes_to_get=["pk", "sk", "digest"])
            return [str(i.digest) for i in items]
        except PynamoDBException as exc:
            raise DependencyUnavailable("The trace table is unavailable.") from exc
