"""Replay execution: deployment revisions (where a candidate answers) and execution evidence.

The service never runs load itself: the CLI runs AIPerf on a workstation or CI runner and posts
the evidence here. A revision stores the NAME of the environment variable holding the endpoint's
credential (`api_key_env`), never the credential.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BaseModel, ConfigDict, Field

from infercrane.bootstrap import get_container
from infercrane.http.context import current_tenant

router = APIGatewayRouter()


class RevisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    url: str = Field(min_length=1, max_length=2048,
                     description="http(s) base URL of the OpenAI-compatible endpoint.")
    model: str | None = Field(default=None, min_length=1, max_length=256)
    api_key_env: str | None = Field(default=None, min_length=1, max_length=128,
                                    description="NAME of the environment variable holding the "
                                                "endpoint credential (read by the CLI at run "
                                                "time; never the credential itself).")


@router.put("/v1/deployments/<deployment>/revisions/<revision>")
def put_revision(deployment: Annotated[str, Path()], revision: Annotated[str, Path()],
                 body: RevisionIn) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().executions.set_revision(
        tenant, deployment, revision, body.url, body.model, body.api_key_env).to_document()


@router.get("/v1/deployments/<deployment>/revisions/<revision>")
def get_revision(deployment: Annotated[str, Path()],
                 revision: Annotated[str, Path()]) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().executions.get_revision(tenant, deployment, revision).to_document()


@router.post("/v1/executions")
def post_execution(body: Annotated[dict[str, Any], Body()]) -> tuple[dict[str, Any], int]:
    tenant = current_tenant(router)
    document, created = get_container().executions.record(tenant, body)
    return document, 202 if created else 200


@router.get("/v1/deployments/<deployment>/executions/latest")
def latest_execution(deployment: Annotated[str, Path()]) -> dict[str, Any]:
    """The deployment's most recently recorded execution evidence (the report's fidelity)."""
    tenant = current_tenant(router)
    return get_container().executions.latest(tenant, deployment)


@router.get("/v1/executions/<id>")
def get_execution(id: Annotated[str, Path()]) -> dict[str, Any]:  # the template's `{id}`
    tenant = current_tenant(router)
    return get_container().executions.get(tenant, id)


@router.get("/v1/executions/<id>/attestation")
def get_execution_attestation(id: Annotated[str, Path()]) -> dict[str, Any]:
    """The DSSE envelope of the service's signed in-toto statement about this evidence."""
    tenant = current_tenant(router)
    return get_container().executions.attestation(tenant, id)
