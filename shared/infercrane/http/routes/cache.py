"""Artifact-cache routes: effective cache states, observations reported by adapters that run
outside AWS, and durable, idempotent prefetch requests. The tenant comes only from the
authorizer context."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from infercrane.bootstrap import get_container
from infercrane.clock import rfc3339
from infercrane.http.context import current_tenant

router = APIGatewayRouter()
_CONFIG = ConfigDict(extra="forbid", hide_input_in_errors=True, protected_namespaces=())


class CacheObservationBody(BaseModel):
    model_config = _CONFIG
    model: str = Field(max_length=200)
    adapter: str = Field(max_length=32)
    location: str = Field(max_length=200)
    state: str = Field(max_length=32)
    evidence: dict[str, str] = Field(default_factory=dict)
    observed_at: AwareDatetime
    ttl_seconds: int | None = Field(default=None, ge=1)


class PrefetchStatusBody(BaseModel):
    """An adapter outside AWS reporting what it did (the Cloud Function path)."""

    model_config = _CONFIG
    status: str = Field(max_length=32)
    reason: str | None = Field(default=None, max_length=512)


class PrefetchResourceBody(BaseModel):
    model_config = _CONFIG
    value: str = Field(max_length=8192)


class PrefetchBody(BaseModel):
    model_config = _CONFIG
    model: str = Field(max_length=200)
    adapter: str = Field(max_length=32)
    location: str = Field(max_length=200)
    source: str = Field(max_length=2048)


@router.get("/v1/cache/<model_digest>")
def get_cache(model_digest: Annotated[str, Path()],
              adapter: Annotated[str | None, Query()] = None,
              location: Annotated[str | None, Query()] = None) -> dict[str, Any]:
    tenant = current_tenant(router)
    # Clients may send the digest's ':' percent-encoded; the resolver hands the raw segment over.
    model = unquote(model_digest)
    found = get_container().cache.effective(tenant, model, adapter, location)
    return {"model": model, "observations": [e.document() for e in found]}


@router.post("/v1/cache-observations")
def post_cache_observation(body: CacheObservationBody) -> dict[str, Any]:
    tenant = current_tenant(router)
    obs = get_container().cache.report(tenant, body.model, body.adapter, body.location,
                                       body.state, body.evidence, body.observed_at,
                                       body.ttl_seconds)
    return {"model": obs.model, "adapter": obs.adapter, "location": obs.location,
            "state": obs.state, "observed_at": rfc3339(obs.observed_at),
            "expires_at": rfc3339(obs.expires_at), "applied": obs.applied}


@router.post("/v1/prefetch-requests")
def post_prefetch_request(body: PrefetchBody) -> tuple[dict[str, Any], int]:
    tenant = current_tenant(router)
    request, created = get_container().prefetch.request(tenant, body.model, body.adapter,
                                                        body.location, body.source)
    return request.document(), 202 if created else 200


@router.get("/v1/prefetch-requests/<id>")
def get_prefetch_request(id: Annotated[str, Path()]) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().prefetch.get(tenant, id).document()


@router.post("/v1/prefetch-requests/<id>/release")
def release_prefetch_request(id: Annotated[str, Path()]) -> tuple[dict[str, Any], int]:
    tenant = current_tenant(router)
    return get_container().prefetch.request_release(tenant, id).document(), 202


# Adapter-side routes for adapters that run outside AWS and report with the tenant's key (the
# GCP Cloud Function): the same transitions and set-if-absent resources the in-AWS adapters write
# directly. A transition the contract does not allow is a 409.
@router.post("/v1/prefetch-requests/<id>/status")
def post_prefetch_status(id: Annotated[str, Path()], body: PrefetchStatusBody) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().prefetch.transition(tenant, id, body.status,
                                               reason=body.reason).document()


@router.put("/v1/prefetch-requests/<id>/resources/<key>")
def put_prefetch_resource(id: Annotated[str, Path()], key: Annotated[str, Path()],
                          body: PrefetchResourceBody) -> dict[str, Any]:
    tenant = current_tenant(router)
    stored = get_container().prefetch.record_resource(tenant, id, key, body.value)
    return {"id": id, "key": key, "value": stored}
