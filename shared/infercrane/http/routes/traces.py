"""Replay traces: build one from captured observations, list, show, and fetch the document.

Building a trace only reads observations: it sends no workload and creates no infrastructure.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BaseModel, ConfigDict, Field

from infercrane.bootstrap import get_container
from infercrane.clock import utcnow
from infercrane.domain.drift import DEFAULT_SIGNIFICANCE
from infercrane.domain.trace_select import DEFAULT_METHOD, Method
from infercrane.domain.validation import BoundedTime
from infercrane.domain.windows import MAX_REQUESTS_LIMIT
from infercrane.http.context import current_tenant

router = APIGatewayRouter()

# A Lambda response carries at most 6 MB; larger documents are fetched from object storage.
INLINE_DOCUMENT_LIMIT_BYTES = 5 * 1024 * 1024


class BuildTrace(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    deployment: str = Field(min_length=1, max_length=128)
    window: str = Field(min_length=1, max_length=16, description="30m, 24h, 7d, 720h ...")
    until: BoundedTime | None = Field(default=None, description="Window end (default: now).")
    max_requests: int = Field(default=1000, ge=1, le=MAX_REQUESTS_LIMIT)
    select: Method = Field(
        default=DEFAULT_METHOD, description="Which slice a window of more than max_requests "
        "keeps: the earliest, the highest arrival rate, or the closest to the window's shape.")


@router.post("/v1/traces")
def build_trace(body: BuildTrace) -> Response[str]:
    tenant = current_tenant(router)
    request_id = router.current_event.request_context.request_id
    outcome = get_container().replay.request_build(
        tenant, body.deployment, body.window, body.until, body.max_requests, utcnow(), request_id,
        body.select)
    if outcome.build is not None:
        # Too large to finish inside API Gateway's 29 s: poll the build (docs/trace.md).
        return Response(202, "application/json", json.dumps(outcome.build),
                        headers={"Location": outcome.build["status_path"]})
    return Response(201 if outcome.created else 200, "application/json",
                    json.dumps(outcome.header))


@router.get("/v1/trace-builds/<build_id>")
def trace_build(build_id: Annotated[str, Path()]) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().replay.build_status(tenant, build_id)


@router.get("/v1/traces")
def list_traces(deployment: Annotated[str, Query(min_length=1, max_length=128)],
                limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                next_token: Annotated[str | None, Query(max_length=2048)] = None) -> dict[str, Any]:
    tenant = current_tenant(router)
    page = get_container().replay.list(tenant, deployment, limit, next_token)
    return {"traces": page.headers, "next_token": page.next_token}


@router.get("/v1/traces/<digest>")
def show_trace(digest: Annotated[str, Path()]) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().replay.header(tenant, digest)


@router.get("/v1/traces/<digest>/document")
def trace_document(digest: Annotated[str, Path()]) -> Response[str]:
    tenant = current_tenant(router)
    access = get_container().replay.document(tenant, digest, INLINE_DOCUMENT_LIMIT_BYTES)
    if access.body is not None:
        return Response(200, "application/json", access.body.decode("utf-8"))
    return Response(303, "application/json", "", headers={"Location": str(access.url)})


@router.get("/v1/traces/<digest>/attestation")
def trace_attestation(digest: Annotated[str, Path()]) -> dict[str, Any]:
    """The DSSE envelope of the service's signed in-toto statement about this trace."""
    tenant = current_tenant(router)
    return get_container().replay.attestation(tenant, digest)


@router.get("/v1/traces/<digest>/aiperf-attestation")
def trace_export_attestation(digest: Annotated[str, Path()],
                             name: Annotated[str | None, Query(max_length=255)] = None
                             ) -> dict[str, Any]:
    """A signed statement naming the SHA-256 of this trace's AIPerf mooncake JSONL export."""
    tenant = current_tenant(router)
    return get_container().replay.export_attestation(tenant, digest, name)


@router.get("/v1/signing-key")
def signing_key() -> dict[str, Any]:
    """The public half of the key this deployment signs evidence with (PEM). Public on purpose
    (no authorizer): anyone handed a signed document must be able to check it."""
    return get_container().replay.signing_key()


class CompareTraces(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    a: str = Field(min_length=6, max_length=71, description="Digest or unique prefix (>= 6 hex).")
    b: str = Field(min_length=6, max_length=71, description="Digest or unique prefix (>= 6 hex).")
    significance: float = Field(default=DEFAULT_SIGNIFICANCE, gt=0, lt=0.5)


@router.post("/v1/trace-comparisons")
def compare_traces(body: CompareTraces) -> tuple[dict[str, Any], int]:
    tenant = current_tenant(router)
    return get_container().replay.compare(tenant, body.a, body.b, body.significance,
                                          utcnow()), 201


@router.get("/v1/trace-comparisons/<digest>/attestation")
def comparison_attestation(digest: Annotated[str, Path()]) -> dict[str, Any]:
    """The DSSE envelope of the service's signed statement about this comparison."""
    tenant = current_tenant(router)
    return get_container().replay.comparison_attestation(tenant, digest)


@router.get("/v1/trace-comparisons/<digest>")
def show_comparison(digest: Annotated[str, Path()]) -> dict[str, Any]:
    tenant = current_tenant(router)
    return get_container().replay.comparison(tenant, digest)
