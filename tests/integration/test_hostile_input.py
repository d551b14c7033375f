"""Hostile input through the real api and admin handlers (over moto): every case answers a 4xx in
the envelope, stores nothing, and no message echoes a submitted value or key name."""

from __future__ import annotations

import base64
import copy
import gzip
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import load_event
from tests.integration.test_handlers_with_events import CONTEXT, handler

CANARY = "CANARY-h3a-do-not-store"
DEEP = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000

# Every route that takes a JSON body: (function, method, path).
JSON_ROUTES = [
    ("api", "POST", "/v1/observations"),
    ("api", "POST", "/v1/otlp/v1/traces"),
    ("api", "POST", "/v1/traces"),
    ("api", "PUT", "/v1/deployments/coder/revisions/r1"),
    ("api", "POST", "/v1/executions"),
    ("api", "POST", "/v1/lifecycle-attempts"),
    ("api", "POST", "/v1/cache-observations"),
    ("api", "POST", "/v1/prefetch-requests"),
    ("admin", "POST", "/v1/admin/tenants"),
    ("admin", "POST", "/v1/admin/tenants/acme/hmac-keys"),
]

# A year-1 or year-9999 time with an offset cannot even be converted to UTC.
EXTREME_TIMES = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00",
                 "0001-01-01T00:00:00Z", "1999-12-31T23:59:59Z", "2999-01-01T00:00:00Z"]


_HANDLERS: dict[str, Any] = {}


def call(function: str, method: str, path: str, body: str | bytes | None = None,
         query: dict[str, str] | None = None, headers: dict[str, str] | None = None,
         ) -> tuple[int, dict[str, Any]]:
    event = copy.deepcopy(load_event("api_post_traces.json"))
    event.update({"httpMethod": method, "path": path, "resource": path, "pathParameters": None,
                  "queryStringParameters": query or None,
                  "multiValueQueryStringParameters":
                      {k: [v] for k, v in (query or {}).items()} or None})
    if headers:
        event["headers"] = {**event["headers"], **headers}
        event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    if isinstance(body, bytes):
        event.update(body=base64.b64encode(body).decode(), isBase64Encoded=True)
    else:
        event.update(body=body, isBase64Encoded=False)
    if function == "admin":
        event["requestContext"]["identity"] = {"sourceIp": "127.0.0.1",
                                               "userArn": "arn:aws:iam::123456789012:user/admin",
                                               "caller": "admin"}
    if function not in _HANDLERS:
        _HANDLERS[function] = handler(function)  # loading a handler module once is enough
    response = _HANDLERS[function](event, CONTEXT)
    return response["statusCode"], json.loads(response["body"] or "null")


def assert_envelope(status: int, doc: dict[str, Any], expected: int | tuple[int, ...]) -> None:
    allowed = expected if isinstance(expected, tuple) else (expected,)
    assert status in allowed, (status, doc)
    error = doc["error"]
    assert set(error) == {"code", "message", "field"}
    assert CANARY not in json.dumps(doc)


@pytest.fixture
def no_stack(monkeypatch):
    """Refusals made before routing touch no store: the handlers need only their Globals."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "infercrane")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "InferCrane")


@pytest.fixture
def tenant(aws):
    aws.container.tenancy.create_tenant("acme", datetime.now(UTC))
    return aws


def stored_observations(aws) -> int:
    """Rows in every observation segment in the bucket, indexed or not."""
    s3 = aws.client("s3")
    bucket = aws.physical.refs["DocumentsBucket"]
    rows = 0
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix="observations/").get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        rows += len(gzip.decompress(body).splitlines())
    return rows


@pytest.mark.parametrize(("function", "method", "path"), JSON_ROUTES)
@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["array", "object"])
def test_json_nested_10000_deep_is_a_400_on_every_route(no_stack, function, method, path, body):
    status, doc = call(function, method, path, body)
    assert_envelope(status, doc, 400)
    assert doc["error"]["code"] == "too_deep"


@pytest.mark.parametrize(("function", "method", "path"), JSON_ROUTES)
def test_invalid_utf8_is_a_400_on_every_route(no_stack, function, method, path):
    status, doc = call(function, method, path, b'{"items": ["\xff\xfe' + CANARY.encode() + b'"]}')
    assert_envelope(status, doc, 400)
    assert doc["error"]["code"] == "invalid_encoding"


def test_a_body_nested_33_deep_is_refused_and_32_deep_passes_the_check(tenant):
    at_limit = '{"items": ' + "[" * 31 + "]" * 31 + "}"
    status, doc = call("api", "POST", "/v1/observations", at_limit)
    assert status == 200, doc
    over = '{"items": ' + "[" * 32 + "]" * 32 + "}"
    status, doc = call("api", "POST", "/v1/observations", over)
    assert_envelope(status, doc, 400)


def test_brackets_inside_strings_do_not_count_as_depth(tenant):
    body = json.dumps({"window": "[" * 100 + '"{' * 50, "deployment": "coder"})
    status, doc = call("api", "POST", "/v1/traces", body)
    assert status == 422 and doc["error"]["code"] != "too_deep", doc


def test_an_otlp_start_time_of_30_digits_is_refused_per_span(tenant):
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat",
            "startTimeUnixNano": "9" * 30, "endTimeUnixNano": "9" * 30,
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                           {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "10"}},
                           {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "5"}}]}
    doc_in = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "coder"}}]},
        "scopeSpans": [{"spans": [span]}]}]}
    status, doc = call("api", "POST", "/v1/otlp/v1/traces", json.dumps(doc_in))
    assert status == 200, doc
    assert (doc["accepted"], doc["rejected"]) == (0, 1)
    assert doc["errors"][0]["code"] == "out_of_range"
    assert stored_observations(tenant) == 0


def test_out_of_range_times_are_422_on_every_time_route(tenant):
    for moment in EXTREME_TIMES:
        _time_routes(moment)


def _time_routes(moment: str) -> None:
    status, doc = call("api", "POST", "/v1/traces",
                       json.dumps({"deployment": "coder", "window": "24h", "until": moment}))
    assert_envelope(status, doc, 422)
    assert doc["error"]["field"] == "until"
    status, doc = call("api", "GET", "/v1/capacity", query={"window": "24h", "until": moment})
    assert_envelope(status, doc, 422)
    status, doc = call("api", "DELETE", "/v1/deployments/coder/observations",
                       query={"before": moment})
    assert_envelope(status, doc, 422)
    status, doc = call("api", "POST", "/v1/cache-observations", json.dumps({
        "model": "sha256:" + "a" * 64, "adapter": "aws", "location": "us-east-1a",
        "state": "present", "observed_at": moment}))
    assert_envelope(status, doc, 422)
    assert doc["error"]["field"] == "observed_at"


def test_out_of_range_times_in_batches_are_rejected_by_index(tenant):
    for moment in EXTREME_TIMES:
        _time_batches(moment)
    assert stored_observations(tenant) == 0


def _time_batches(moment: str) -> None:
    attempt = {"attempt_id": "a1", "deployment": "coder", "operation": "create",
               "adapter": "aws", "runtime": "vllm", "compute_mode": "on-demand",
               "region": "us-east-1", "gpu": "h100", "gpu_count": 1, "started_at": moment,
               "outcome": "failed"}
    status, doc = call("api", "POST", "/v1/lifecycle-attempts", json.dumps({"items": [attempt]}))
    assert status == 200 and doc["rejected"] == 1, doc
    assert doc["errors"][0]["field"] == "started_at"
    item = {"deployment": "coder", "arrival": moment, "input_tokens": 1, "output_tokens": 1,
            "latency_ms": 1.0}
    status, doc = call("api", "POST", "/v1/observations", json.dumps({"items": [item]}))
    assert status == 200 and doc["rejected"] == 1, doc
    assert doc["errors"][0]["field"] == "arrival"


def observation(**extra: Any) -> dict[str, Any]:
    return {"deployment": "coder", "arrival": datetime.now(UTC).isoformat(), "input_tokens": 10,
            "output_tokens": 5, "latency_ms": 100.0, **extra}


MODEL = {"name": "linear-v1", "overhead_ms": 50.0, "prefill_ms_per_token": 0.1,
         "decode_ms_per_token": 20.0}


CLOSED_CASES = [
    {"timing_source": "modeled", "timing_model": MODEL | {"note": CANARY * 3000}},
    {"timing_source": "modeled", "timing_model": MODEL | {"prompt": CANARY}},
    {"timing_source": "modeled", "timing_model": {"name": CANARY}},
    {"timing_source": "modeled", "timing_model": MODEL | {"overhead_ms": 1e300}},
    {"source": "imported", "provenance": base64.b64encode(CANARY.encode() * 8).decode()[:256]},
    {"source": "imported", "provenance": "jsonl:sha256:" + CANARY},
]


def test_timing_model_and_provenance_are_closed(tenant):
    for extra in CLOSED_CASES:
        status, doc = call("api", "POST", "/v1/observations",
                           json.dumps({"items": [observation(**extra)]}))
        assert status == 200 and doc["rejected"] == 1, (extra, doc)
        assert CANARY not in json.dumps(doc) and "note" not in json.dumps(doc)
    assert stored_observations(tenant) == 0


def test_a_closed_timing_model_and_provenance_are_stored(tenant):
    item = observation(timing_source="modeled", timing_model=MODEL, source="imported",
                       provenance="azure-csv:sha256:" + "0" * 64)
    status, doc = call("api", "POST", "/v1/observations", json.dumps({"items": [item]}))
    assert (status, doc["accepted"]) == (200, 1), doc
    assert stored_observations(tenant) == 1


EVIDENCE_CASES = [
    {"prompt": CANARY},
    {"schema": "infercrane.replay.execution/v1", "measured": {"deep": [{"Messages": [CANARY]}]}},
    {"schema": "infercrane.replay.execution/v1", "note": CANARY * 30_000},
    {"schema": "infercrane.replay.execution/v1", "build": {CANARY: 1}},
]


def test_execution_evidence_is_a_closed_schema(tenant):
    for document in EVIDENCE_CASES:
        status, doc = call("api", "POST", "/v1/executions", json.dumps(document))
        assert_envelope(status, doc, (400, 413, 422))
        assert "deep" not in json.dumps(doc)


def test_unknown_keys_are_refused_without_naming_them(tenant):
    status, doc = call("api", "POST", "/v1/traces",
                       json.dumps({"deployment": "coder", "window": "24h", CANARY: 1}))
    assert_envelope(status, doc, 422)
    status, doc = call("api", "POST", "/v1/lifecycle-attempts",
                       json.dumps({"items": [], CANARY: 1}))
    assert_envelope(status, doc, 422)
    status, doc = call("api", "POST", "/v1/observations",
                       json.dumps({"items": [observation(**{CANARY: 1})]}))
    assert status == 200 and CANARY not in json.dumps(doc)
