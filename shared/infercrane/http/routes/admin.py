"""Admin routes (`/v1/admin/...`): IAM-authorized in AWS, admin key locally."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BaseModel, ConfigDict, Field

from infercrane.bootstrap import get_container
from infercrane.clock import rfc3339, utcnow
from infercrane.domain.migration import CURSOR_MAX
from infercrane.domain.tenancy import validate_tenant_name
from infercrane.http.context import require_admin

router = APIGatewayRouter()


class CreateTenant(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    name: str = Field(min_length=1, max_length=63)


class MigrateObservations(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    deployment: str = Field(min_length=1, max_length=128)
    cursor: str | None = Field(default=None, max_length=CURSOR_MAX)


class RotateKeys(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    purpose: str = "identity"


def _issued(issued: Any) -> dict[str, Any]:
    return {"tenant": issued.tenant, "key_id": issued.key_id, "api_key": issued.raw_key}


@router.post("/v1/admin/tenants")
def create_tenant(body: CreateTenant) -> tuple[dict[str, Any], int]:
    require_admin(router)
    return _issued(get_container().tenancy.create_tenant(body.name, utcnow())), 201


@router.post("/v1/admin/tenants/<tenant>/api-keys")
def create_api_key(tenant: Annotated[str, Path()]) -> tuple[dict[str, Any], int]:
    require_admin(router)
    return _issued(get_container().tenancy.create_api_key(tenant, utcnow())), 201


@router.delete("/v1/admin/tenants/<tenant>/api-keys/<key_id>")
def revoke_api_key(tenant: Annotated[str, Path()], key_id: Annotated[str, Path()]) -> dict[str, Any]:
    require_admin(router)
    now = utcnow()
    get_container().tenancy.revoke_api_key(tenant, key_id, now)
    return {"tenant": tenant, "key_id": key_id, "revoked_at": rfc3339(now)}


@router.post("/v1/admin/tenants/<tenant>/hmac-keys")
def rotate_hmac_keys(tenant: Annotated[str, Path()], body: RotateKeys) -> dict[str, Any]:
    require_admin(router)
    version = get_container().tenancy.rotate_hmac_keys(tenant, body.purpose)
    return {"tenant": tenant, "purpose": body.purpose, "current_version": version}


# The cut-over to segments (docs/capture.md, Storage): a page a call, so each fits a Lambda's time.
@router.get("/v1/admin/tenants/<tenant>/legacy-deployments")
def legacy_deployments(tenant: Annotated[str, Path()],
                       cursor: Annotated[str | None, Query(max_length=400)] = None,
                       ) -> dict[str, Any]:
    require_admin(router)
    found, after = get_container().observation_migration.deployments(
        validate_tenant_name(tenant), cursor)
    return {"tenant": tenant, "deployments": found, "cursor": after}


@router.post("/v1/admin/tenants/<tenant>/observation-migrations")
def migrate_observations(tenant: Annotated[str, Path()],
                         body: MigrateObservations) -> dict[str, Any]:
    require_admin(router)
    page = get_container().observation_migration.page(validate_tenant_name(tenant),
                                                      body.deployment, body.cursor)
    return {"tenant": tenant, **page.document()}


@router.get("/v1/admin/dlqs")
def list_dlqs() -> dict[str, Any]:
    require_admin(router)
    return {"queues": [d.__dict__ for d in get_container().dlq.depths()]}


@router.get("/v1/admin/dlqs/<queue>")
def show_dlq(queue: Annotated[str, Path()],
             limit: Annotated[int, Query(ge=1, le=10)] = 10) -> dict[str, Any]:
    require_admin(router)
    depth, letters = get_container().dlq.show(queue, limit)
    return {"queue": depth.__dict__, "messages": [m.__dict__ for m in letters]}


@router.post("/v1/admin/dlqs/<queue>/redrive")
def redrive_dlq(queue: Annotated[str, Path()],
                limit: Annotated[int, Query(ge=1, le=10000)] = 1000) -> dict[str, Any]:
    require_admin(router)
    return {"queue": queue, "moved": get_container().dlq.redrive(queue, limit)}
