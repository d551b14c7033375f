"""DynamoDB adapter for deployment revisions in the ReplayTable.

pk = "<tenant>", sk = "REV#<deployment>#<revision>": one GetItem, and another tenant's key never
matches. Names cannot contain '#' (checked in the domain), so keys never collide. Only the NAME of
the environment variable holding an endpoint credential is stored, never a credential.
"""

from __future__ import annotations

from pynamodb.attributes import UnicodeAttribute
from pynamodb.exceptions import PynamoDBException
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import DynamoConfig, bind, write_error
from infercrane.domain.execution import Revision
from infercrane.errors import DependencyUnavailable

SK_PREFIX = "REV#"


class RevisionItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    deployment = UnicodeAttribute()
    revision = UnicodeAttribute()
    url = UnicodeAttribute()
    model = UnicodeAttribute(null=True)
    api_key_env = UnicodeAttribute(null=True)
    updated_at = UnicodeAttribute()


def _sk(deployment: str, revision: str) -> str:
    return f"{SK_PREFIX}{deployment}#{revision}"


class DynamoRevisionStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(RevisionItem, table_name, config)

    def put_revision(self, tenant: str, revision: Revision) -> None:
        item = self._item(tenant, _sk(revision.deployment, revision.revision),
                          deployment=revision.deployment, revision=revision.revision,
                          url=revision.url, model=revision.model,
                          api_key_env=revision.api_key_env,
                          updated_at=revision.updated_at or "")
        try:
            item.save()
        except PynamoDBException as exc:
            raise write_error(exc, "The replay store is unavailable.") from exc

    def get_revision(self, tenant: str, deployment: str, revision: str) -> Revision | None:
        try:
            item = self._item.get(tenant, _sk(deployment, revision), consistent_read=True)
        except self._item.DoesNotExist:
            return None
        except PynamoDBException as exc:
            raise DependencyUnavailable("The replay store is unavailable.") from exc
        return Revision(item.deployment, item.revision, item.url, item.model, item.api_key_env,
                        item.updated_at or None)
