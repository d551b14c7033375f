"""DynamoDB adapter for the tenant/API-key directory (the authorizer's hot path: one GetItem)."""

from __future__ import annotations

from datetime import UTC, datetime

from pynamodb.attributes import UnicodeAttribute, UTCDateTimeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import PutError, PynamoDBException, TransactWriteError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from infercrane.adapters.dynamo.base import DynamoConfig, bind
from infercrane.domain.tenancy import ApiKeyRecord
from infercrane.errors import Conflict, DependencyUnavailable, NotFound


class DirectoryItem(Model):
    """pk/sk layouts:
    TENANT#<t> / META            the tenant
    TENANT#<t> / KEY#<key_id>    a key as its tenant sees it (hash, status)
    APIKEY#<sha256> / KEY        the authorizer's lookup (tenant, key id, status)
    """

    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    tenant = UnicodeAttribute()
    key_id = UnicodeAttribute(null=True)
    key_hash = UnicodeAttribute(null=True)
    created_at = UTCDateTimeAttribute()
    revoked_at = UTCDateTimeAttribute(null=True)


class DynamoDirectoryStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(DirectoryItem, table_name, config)
        self._config = config

    def create_tenant(self, tenant: str, now: datetime) -> None:
        try:
            self._item(f"TENANT#{tenant}", "META", tenant=tenant, created_at=now).save(
                condition=self._item.pk.does_not_exist()
            )
        except PutError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                raise Conflict("Tenant already exists.", field="name") from exc
            raise DependencyUnavailable("The directory is unavailable.") from exc

    def tenant_exists(self, tenant: str) -> bool:
        try:
            self._item.get(f"TENANT#{tenant}", "META", consistent_read=True)
        except self._item.DoesNotExist:
            return False
        except PynamoDBException as exc:
            raise DependencyUnavailable("The directory is unavailable.") from exc
        return True

    def put_api_key(self, record: ApiKeyRecord) -> None:
        lookup = self._item(f"APIKEY#{record.key_hash}", "KEY", tenant=record.tenant,
                            key_id=record.key_id, created_at=record.created_at)
        listing = self._item(f"TENANT#{record.tenant}", f"KEY#{record.key_id}",
                             tenant=record.tenant, key_id=record.key_id,
                             key_hash=record.key_hash, created_at=record.created_at)
        try:
            with TransactWrite(connection=self._connection()) as tx:
                tx.save(lookup, condition=self._item.pk.does_not_exist())
                tx.save(listing, condition=self._item.pk.does_not_exist())
        except TransactWriteError as exc:
            raise DependencyUnavailable("The directory is unavailable.") from exc

    def find_api_key(self, key_hash: str) -> ApiKeyRecord | None:
        try:
            item = self._item.get(f"APIKEY#{key_hash}", "KEY")
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The directory is unavailable.") from exc
        return ApiKeyRecord(tenant=item.tenant, key_id=item.key_id or "", key_hash=key_hash,
                            created_at=item.created_at, revoked_at=item.revoked_at)

    def revoke_api_key(self, tenant: str, key_id: str, now: datetime) -> None:
        try:
            listing = self._item.get(f"TENANT#{tenant}", f"KEY#{key_id}", consistent_read=True)
        except self._item.DoesNotExist:
            raise NotFound("No such API key.", field="key_id") from None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The directory is unavailable.") from exc
        if listing.revoked_at is not None:
            return
        stamp = now.astimezone(UTC)
        lookup = self._item(f"APIKEY#{listing.key_hash}", "KEY")
        try:
            with TransactWrite(connection=self._connection()) as tx:
                tx.update(listing, actions=[self._item.revoked_at.set(stamp)])
                tx.update(lookup, actions=[self._item.revoked_at.set(stamp)])
        except TransactWriteError as exc:
            raise DependencyUnavailable("The directory is unavailable.") from exc

    def _connection(self) -> Connection:
        return Connection(region=self._config.region, host=self._config.host)
