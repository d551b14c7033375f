"""Capture routes: observation batches, OTLP/HTTP traces (JSON and protobuf), and deletion.

Bodies are read here only to be handed to the capture service: they are never logged, and the
responses carry counts, indexes, field names and fixed sentences, never a submitted value.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from aws_lambda_powertools.metrics import MetricUnit

from infercrane.bootstrap import get_container
from infercrane.clock import rfc3339, utcnow
from infercrane.domain.capture import IngestResult, batch_items, parse_time
from infercrane.domain.imports import ImportIn, describe
from infercrane.domain.otlp import OtlpOptions
from infercrane.errors import MalformedRequest
from infercrane.http.app import request_json
from infercrane.http.body import (
    PROTOBUF_MEDIA_TYPE,
    PROTOBUF_MEDIA_TYPES,
    inflate_gzip,
)
from infercrane.http.context import current_tenant

router = APIGatewayRouter()
metrics = Metrics()


def _header(name: str) -> str:
    headers = router.current_event.headers or {}
    for key, value in headers.items():
        if key.lower() == name:
            return str(value or "")
    return ""


def _raw_body() -> bytes:
    """A protobuf request body as bytes: API Gateway hands binary bodies over base64-encoded
    (Powertools' `decoded_body` decodes to text, which a protobuf body is not). JSON bodies come
    from `request_json`: the resolver already decoded and inflated them."""
    event = router.current_event
    body = event.body or ""
    if event.is_base64_encoded:
        try:
            raw = base64.b64decode(body)
        except (binascii.Error, ValueError) as exc:
            raise MalformedRequest("The request body could not be decoded.") from exc
    else:
        raw = body.encode("utf-8", "surrogatepass")
    if _header("content-encoding").strip().lower() == "gzip":
        raw = inflate_gzip(raw)
    return raw


def _count(result: IngestResult) -> None:
    # Counts only; no dimension ever carries a tenant-supplied value.
    metrics.add_metric(name="ObservationsAccepted", unit=MetricUnit.Count, value=result.accepted)
    metrics.add_metric(name="ObservationsRejected", unit=MetricUnit.Count, value=result.rejected)
    metrics.add_metric(name="ObservationWriteRequests", unit=MetricUnit.Count,
                       value=result.stats.requests)


@router.post("/v1/observations")
def post_observations() -> dict[str, Any]:
    tenant = current_tenant(router)
    items = batch_items(request_json(router))
    result = get_container().capture.ingest(tenant, items)
    _count(result)
    return result.to_document()


@router.post("/v1/otlp/v1/traces")
def post_otlp_traces(
    deployment: Annotated[str | None, Query(max_length=128)] = None,
    ttft_attribute: Annotated[str | None, Query(max_length=128)] = None,
    ttft_unit: Annotated[str, Query(pattern="^(s|ms)$")] = "s",
) -> Any:  # a Response; Powertools builds no schema for it
    tenant = current_tenant(router)
    content_type = _header("content-type").split(";")[0].strip().lower()
    options = OtlpOptions(deployment=deployment, ttft_attribute=ttft_attribute, ttft_unit=ttft_unit)
    if content_type in PROTOBUF_MEDIA_TYPES:
        from infercrane.adapters.otlp_protobuf import decode_traces, encode_response

        result = get_container().capture.ingest_otlp(tenant, decode_traces(_raw_body()), options)
        _count(result)
        metrics.add_metric(name="OtlpContentAttributesDropped", unit=MetricUnit.Count,
                           value=result.dropped_content_attributes)
        message = "Some spans were rejected." if result.rejected else ""
        return Response(200, PROTOBUF_MEDIA_TYPE, encode_response(result.rejected, message))
    # Any other media type was refused before routing (`http/app.checked_event`): this is JSON.
    result = get_container().capture.ingest_otlp(tenant, request_json(router), options)
    _count(result)
    metrics.add_metric(name="OtlpContentAttributesDropped", unit=MetricUnit.Count,
                       value=result.dropped_content_attributes)
    return Response(200, "application/json", json.dumps(result.to_document()))


@router.delete("/v1/deployments/<deployment>/observations")
def delete_observations(deployment: Annotated[str, Path()],
                        before: Annotated[str | None, Query()] = None) -> dict[str, Any]:
    tenant = current_tenant(router)
    cutoff = parse_time(before, "before") if before is not None else None
    # Bounded per call: `finished` false means call again (the same request continues).
    deleted, finished = get_container().capture.delete_page(tenant, deployment, cutoff)
    return {"deployment": deployment, "deleted": deleted,
            "before": rfc3339(cutoff) if cutoff is not None else None, "finished": finished}


@router.post("/v1/imports")
def register_import(body: ImportIn) -> tuple[dict[str, Any], int]:
    """Register a file import before its observations are sent (see domain/imports.py)."""
    tenant = current_tenant(router)
    record = get_container().imports.register(tenant, body, rfc3339(utcnow()))
    return describe(record), 201 if record["status"] == "new" else 200
