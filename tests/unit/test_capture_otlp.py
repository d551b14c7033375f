"""OTLP spans -> observations: the allow-list, the mapping, and JSON/protobuf equivalence."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from infercrane.adapters.otlp_protobuf import decode_traces
from infercrane.domain import identity
from infercrane.domain.capture import CaptureService
from infercrane.domain.otlp import CONTENT_NAMES, SPAN_ALLOW, OtlpOptions, map_document
from infercrane.errors import InvalidInput, MalformedRequest
from tests.unit.test_capture_domain import MemoryKeyrings, MemoryStore

CANARY = "CANARY-otlp-9d1c-content"
NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
START_NS = 1_764_446_400_123_456_789  # 2025-11-29T20:00:00.123456789Z
TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


def attr_json(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}}}
    return {"key": key, "value": {"stringValue": value}}


SPAN_ATTRS: dict[str, Any] = {
    "gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3-coder",
    "gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 96,
    "gen_ai.conversation.id": "conv-123", "gen_ai.request.stream": True,
    "gen_ai.response.finish_reasons": ["stop"],
    "gen_ai.input.messages": CANARY, "gen_ai.output.messages": CANARY,
    "gen_ai.prompt.0.content": CANARY, "llm.input_messages.0.message.content": CANARY,
    "user.email": CANARY,
}


def json_export(attrs: dict[str, Any] | None = None, status: int = 0,
                end_ns: int = START_NS + 1_840_500_000) -> dict[str, Any]:
    return {"resourceSpans": [{
        "resource": {"attributes": [attr_json("service.name", "coder-production"),
                                    attr_json("host.name", CANARY)]},
        "scopeSpans": [{"scope": {"name": "openai"}, "spans": [{
            "traceId": TRACE, "spanId": SPAN, "name": "chat qwen3-coder", "kind": 3,
            "startTimeUnixNano": str(START_NS), "endTimeUnixNano": str(end_ns),
            "attributes": [attr_json(k, v) for k, v in (SPAN_ATTRS if attrs is None else attrs).items()],
            "events": [{"name": "gen_ai.user.message", "timeUnixNano": str(START_NS),
                        "attributes": [attr_json("content", CANARY)]}],
            "status": {"code": status},
        }, {
            "traceId": TRACE, "spanId": "aaaaaaaaaaaaaaaa", "name": "GET /health",
            "startTimeUnixNano": str(START_NS), "endTimeUnixNano": str(START_NS + 1000),
            "attributes": [attr_json("http.request.method", "GET")],
        }]}],
    }]}


def proto_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, list):
        out = AnyValue()
        out.array_value.values.extend(AnyValue(string_value=v) for v in value)
        return out
    return AnyValue(string_value=value)


def proto_export(attrs: dict[str, Any] | None = None) -> bytes:
    span = Span(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(SPAN), name="chat qwen3-coder",
                kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=START_NS,
                end_time_unix_nano=START_NS + 1_840_500_000,
                attributes=[KeyValue(key=k, value=proto_value(v))
                            for k, v in (SPAN_ATTRS if attrs is None else attrs).items()],
                events=[Span.Event(name="gen_ai.user.message", time_unix_nano=START_NS,
                                   attributes=[KeyValue(key="content",
                                                        value=AnyValue(string_value=CANARY))])],
                status=Status(code=Status.STATUS_CODE_UNSET))
    health = Span(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex("aa" * 8), name="GET /health",
                  start_time_unix_nano=START_NS, end_time_unix_nano=START_NS + 1000,
                  attributes=[KeyValue(key="http.request.method", value=AnyValue(string_value="GET"))])
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[
            KeyValue(key="service.name", value=AnyValue(string_value="coder-production")),
            KeyValue(key="host.name", value=AnyValue(string_value=CANARY))]),
        scope_spans=[ScopeSpans(spans=[span, health])])])
    return request.SerializeToString()


def service() -> tuple[CaptureService, MemoryStore, MemoryKeyrings]:
    store, rings = MemoryStore(), MemoryKeyrings("demo")
    return CaptureService(store, rings, clock=lambda: NOW), store, rings


def test_otlp_span_maps_to_one_observation_and_drops_content():
    capture, store, rings = service()
    result = capture.ingest_otlp("demo", json_export())
    assert (result.accepted, result.rejected, result.spans, result.ignored_spans) == (1, 0, 2, 1)
    # 5 content span attributes + 1 content event attribute; host.name and http.* also dropped
    assert result.dropped_content_attributes == 5
    assert result.dropped_attributes == 8
    (obs,) = store.items.values()
    assert obs.deployment == "coder-production"
    assert obs.arrival_ms == START_NS // 1_000_000
    assert obs.latency_ms == pytest.approx(1840.5)
    assert (obs.input_tokens, obs.output_tokens, obs.streaming, obs.outcome) == (812, 96, True, "ok")
    assert obs.session_id == identity.pseudonymize("conv-123", rings.get("demo").identity)
    assert obs.observation_id.startswith("otlp-")
    assert TRACE not in obs.observation_id
    assert CANARY not in repr(obs)
    assert CANARY not in json.dumps(result.to_document())


def test_otlp_json_and_protobuf_of_the_same_span_give_the_same_observation():
    json_capture, json_store, rings = service()
    proto_capture = CaptureService(MemoryStore(), rings, clock=lambda: NOW)
    json_capture.ingest_otlp("demo", json_export())
    decoded = decode_traces(proto_export())
    proto_result = proto_capture.ingest_otlp("demo", decoded)
    assert proto_result.accepted == 1
    assert list(json_store.items.values()) == list(proto_capture._store.items.values())  # type: ignore[attr-defined]


@pytest.mark.parametrize(("status", "error_type", "expected"), [
    (2, None, "server_error"), (2, "timeout", "timeout"), (0, "TimeoutError", "timeout"),
    (2, "429", "client_error"), (2, "503", "server_error"), (2, "cancelled", "cancelled"),
    (1, None, "ok")])
def test_otlp_outcome_comes_from_status_and_error_type(status, error_type, expected):
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 1,
             "gen_ai.usage.output_tokens": 1}
    if error_type:
        attrs["error.type"] = error_type
    mapping = map_document(json_export(attrs, status=status))
    assert mapping.items[0]["outcome"] == expected


def test_otlp_errors_name_the_span_and_its_otlp_field():
    capture, store, _ = service()
    doc = json_export({"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 5},
                      end_ns=START_NS - 1)
    result = capture.ingest_otlp("demo", doc)
    assert result.rejected == 1
    assert result.errors[0].index == 0
    assert result.errors[0].field in ("endTimeUnixNano", "attributes.gen_ai.usage.output_tokens")
    assert result.to_document()["partialSuccess"]["rejectedSpans"] == 1
    assert not store.items


def test_ttft_is_read_only_through_the_explicit_option():
    attrs = {**SPAN_ATTRS, "vendor.ttft": 0.25}
    assert "ttft_ms" not in map_document(json_export(attrs)).items[0]
    mapped = map_document(json_export(attrs), OtlpOptions(ttft_attribute="vendor.ttft"))
    assert mapped.items[0]["ttft_ms"] == pytest.approx(250.0)


def test_otlp_whole_request_problems_raise():
    with pytest.raises(InvalidInput):
        map_document({"spans": []})
    with pytest.raises(MalformedRequest):
        decode_traces(b"\xff\xff not protobuf")


names = st.sampled_from([*sorted(SPAN_ALLOW | CONTENT_NAMES), "x.custom", "input.value", "db.statement"])
values = st.one_of(st.integers(-5, 10**8), st.booleans(), st.text(max_size=10).map(lambda s: CANARY + s),
                   st.lists(st.text(max_size=5).map(lambda s: CANARY + s), max_size=2))


@settings(max_examples=150, deadline=None)
@given(attrs=st.dictionaries(names, values, max_size=10),
       duration=st.integers(-10**9, 10**12), status=st.sampled_from([0, 1, 2]))
def test_otlp_mapping_fuzz_stores_no_attribute_text(attrs, duration, status):
    capture, store, rings = service()
    keys = rings.get("demo").identity
    doc = json_export(attrs, status=status, end_ns=START_NS + duration)
    result = capture.ingest_otlp("demo", doc)
    assert result.spans == 2
    assert result.accepted + result.rejected + result.ignored_spans == 2
    assert CANARY not in json.dumps(result.to_document())
    for obs in store.items.values():
        assert CANARY not in repr(obs)
        assert obs.input_tokens == attrs.get("gen_ai.usage.input_tokens",
                                             attrs.get("gen_ai.usage.prompt_tokens"))
        assert obs.latency_ms == pytest.approx(duration / 1e6)
        conv = attrs.get("gen_ai.conversation.id")
        assert obs.session_id == (identity.pseudonymize(conv, keys) if conv else None)
    dropped = [k for k in attrs if k not in SPAN_ALLOW]
    assert result.dropped_attributes == len(dropped) + 3  # + host.name, event attr, http attr
