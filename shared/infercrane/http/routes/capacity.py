"""Capacity routes: lifecycle attempt batches and the tenant-observed capacity report.

The tenant is the authorizer's; bodies are never logged or echoed (errors name fields only).
The capacity domain (ddsketch, its models) is imported by the routes that use it: the api function
serves every router, and a cold start serving another route need not pay for it.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from infercrane.bootstrap import get_container
from infercrane.clock import utcnow
from infercrane.domain.windows import parse_until
from infercrane.http.app import request_json
from infercrane.http.context import current_tenant

router = APIGatewayRouter()


@router.post("/v1/lifecycle-attempts")
def post_lifecycle_attempts() -> dict[str, Any]:
    from infercrane.domain.capacity import batch_of

    tenant = current_tenant(router)
    # Parsed once, before routing (media type, size, UTF-8, depth, syntax): never decoded again
    # here, where a body that is not UTF-8 was a 500.
    body = request_json(router)
    return get_container().capacity.ingest(tenant, batch_of(body), utcnow()).to_document()


@router.get("/v1/capacity")
def get_capacity(
    window: Annotated[str, Query(max_length=16)] = "720h",
    until: Annotated[str | None, Query(max_length=40)] = None,
    group_by: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    tenant = current_tenant(router)
    moment = parse_until(until) if until is not None else None
    return get_container().capacity.report(tenant, window, moment, group_by, utcnow())


@router.get("/v1/capacity/advice")
def get_capacity_advice(
    gpu: Annotated[str, Query(min_length=1, max_length=64)],
    count: Annotated[int | None, Query(ge=1, le=4096)] = None,
    adapter: Annotated[str | None, Query(max_length=16)] = None,
    window: Annotated[str, Query(max_length=16)] = "720h",
    until: Annotated[str | None, Query(max_length=40)] = None,
) -> dict[str, Any]:
    from infercrane.domain.capacity.advice import advise

    tenant = current_tenant(router)
    moment = parse_until(until) if until is not None else None
    return advise(get_container().capacity, tenant, gpu=gpu, count=count, adapter=adapter,
                  window=window, until=moment, now=utcnow())
