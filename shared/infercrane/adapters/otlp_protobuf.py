"""OTLP/HTTP protobuf -> the OTLP JSON shape, so both encodings reach the same observation.

`json_format.MessageToDict` gives the proto3 JSON mapping, which differs from OTLP/JSON in one
way that matters here: bytes (trace and span ids) come out base64, while OTLP/JSON writes them as
hex. Ids are rewritten to hex; int64 values stay strings (the domain accepts both).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from infercrane.errors import MalformedRequest


def _hex(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        return value


def decode_traces(body: bytes) -> dict[str, Any]:
    """An ExportTraceServiceRequest as the dict OTLP/JSON would have carried."""
    try:
        message = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, ValueError) as exc:
        raise MalformedRequest("The request body is not a valid OTLP protobuf message.",
                               code="invalid_protobuf") from exc
    doc: dict[str, Any] = json_format.MessageToDict(message, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex(span[key])
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if key in link:
                            link[key] = _hex(link[key])
    return doc


def encode_response(rejected: int, message: str = "") -> bytes:
    """ExportTraceServiceResponse (partial success only when something was rejected)."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=rejected, error_message=message))
    return response.SerializeToString()
