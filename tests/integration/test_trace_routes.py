"""The trace routes through the api handler, with tables and bucket in moto."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest
import requests

from infercrane.domain.digest import verify_digest
from infercrane.domain.observation import StoredObservation
from infercrane.http.routes import traces as trace_routes
from tests.conftest import load_event
from tests.integration.test_handlers_with_events import CONTEXT, handler

UNTIL_MS = int(datetime(2026, 11, 29, 20, 0, tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def observations(aws):
    """The capture area's DynamoDB store, as the api function is wired."""
    return aws.container.observations


def stored(i: int, tenant: str = "acme") -> StoredObservation:
    return StoredObservation(
        tenant=tenant, deployment="coder-production", observation_id=f"o{i:05d}",
        arrival_ms=UTC_ms(i), input_tokens=100 + i, output_tokens=7, latency_ms=120.0,
        outcome="ok", streaming=True, sampling_rate=1.0, source="captured",
        ingested_at_ms=UNTIL_MS, ttft_ms=30.0, key_version="v1")


def UTC_ms(i: int) -> int:
    return UNTIL_MS - 3_600_000 + 1000 * i


def call(method: str, path: str, *, body=None, query=None, tenant="acme", path_params=None):
    event = copy.deepcopy(load_event("api_post_traces.json"))
    event.update({"httpMethod": method, "path": path, "body": None if body is None else json.dumps(body),
                  "queryStringParameters": query, "pathParameters": path_params,
                  "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None})
    event["requestContext"]["authorizer"]["tenant"] = tenant
    response = handler("api")(event, CONTEXT)
    return response["statusCode"], response


def test_the_sam_event_builds_a_trace_of_the_window(aws, observations):
    observations.put_many([stored(i) for i in range(30)])
    response = handler("api")(load_event("api_post_traces.json"), CONTEXT)
    assert response["statusCode"] == 201
    header = json.loads(response["body"])
    assert header["sample_count"] == 30
    assert header["truncated"] is False
    assert header["window"]["end"] == "2026-11-29T20:00:00.000Z"


def test_building_again_answers_200_with_the_same_header(aws, observations):
    observations.put_many([stored(i) for i in range(5)])
    body = {"deployment": "coder-production", "window": "24h", "until": "2026-11-29T20:00:00Z",
            "max_requests": 3}
    status1, r1 = call("POST", "/v1/traces", body=body)
    status2, r2 = call("POST", "/v1/traces", body=body)
    assert (status1, status2) == (201, 200)
    assert json.loads(r1["body"]) == json.loads(r2["body"])
    assert json.loads(r1["body"])["truncated"] is True


def test_show_document_and_list_and_another_tenant_gets_404(aws, observations):
    observations.put_many([stored(i) for i in range(5)])
    _, built = call("POST", "/v1/traces", body={"deployment": "coder-production", "window": "24h",
                                                "until": "2026-11-29T20:00:00Z"})
    digest = json.loads(built["body"])["digest"]
    status, shown = call("GET", f"/v1/traces/{digest}")
    assert status == 200
    assert json.loads(shown["body"])["digest"] == digest
    status, doc = call("GET", f"/v1/traces/{digest}/document")
    assert status == 200
    assert verify_digest(json.loads(doc["body"]))[0]
    status, listed = call("GET", "/v1/traces", query={"deployment": "coder-production"})
    assert [h["digest"] for h in json.loads(listed["body"])["traces"]] == [digest]
    for path in (f"/v1/traces/{digest}", f"/v1/traces/{digest}/document"):
        status, other = call("GET", path, tenant="other")
        assert status == 404
        assert json.loads(other["body"])["error"]["code"] == "not_found"
    status, listed = call("GET", "/v1/traces", query={"deployment": "coder-production"},
                          tenant="other")
    assert json.loads(listed["body"])["traces"] == []


def test_a_large_document_is_a_303_to_a_presigned_url(aws, observations, monkeypatch):
    observations.put_many([stored(i) for i in range(5)])
    _, built = call("POST", "/v1/traces", body={"deployment": "coder-production", "window": "24h",
                                                "until": "2026-11-29T20:00:00Z"})
    digest = json.loads(built["body"])["digest"]
    monkeypatch.setattr(trace_routes, "INLINE_DOCUMENT_LIMIT_BYTES", 100)
    status, response = call("GET", f"/v1/traces/{digest}/document")
    assert status == 303
    location = (response.get("headers") or {}).get("Location") or response["multiValueHeaders"]["Location"][0]
    fetched = requests.get(location, timeout=10)
    assert fetched.status_code == 200
    assert json.loads(fetched.content)["digest"] == digest


@pytest.mark.parametrize(("body", "field"), [
    ({"deployment": "coder-production", "window": "CANARY"}, "window"),
    ({"deployment": "coder-production", "window": "24h", "max_requests": 0}, "max_requests"),
    ({"deployment": "coder-production", "window": "24h", "until": "2026-11-29T20:00:00"}, "until"),
    # An unknown key is never named (it is whatever the caller chose): only its parent, the body.
    ({"deployment": "coder-production", "window": "24h", "tenant": "other"}, None),
    ({"window": "24h"}, "deployment"),
])
def test_bad_builds_answer_422_naming_the_field_without_echoing(aws, observations, body, field):
    status, response = call("POST", "/v1/traces", body=body)
    assert status == 422
    error = json.loads(response["body"])["error"]
    assert error["field"] == field
    assert "CANARY" not in response["body"]


def test_a_malformed_digest_is_refused_and_an_unknown_one_is_404(aws, observations):
    status, _ = call("GET", "/v1/traces/sha256:nothex")
    assert status == 422
    status, _ = call("GET", "/v1/traces/sha256:" + "0" * 64)
    assert status == 404


def test_list_limit_is_bounded(aws, observations):
    status, response = call("GET", "/v1/traces", query={"deployment": "coder-production",
                                                        "limit": "1001"})
    assert status == 422
    assert json.loads(response["body"])["error"]["field"] == "limit"


def test_a_digest_prefix_resolves_in_the_table_and_an_ambiguous_one_is_409(aws, observations):
    observations.put_many([stored(i) for i in range(5)])
    _, built = call("POST", "/v1/traces", body={"deployment": "coder-production", "window": "24h",
                                                "until": "2026-11-29T20:00:00Z"})
    header = json.loads(built["body"])
    digest = header["digest"]
    status, shown = call("GET", f"/v1/traces/{digest[7:15]}")
    assert (status, json.loads(shown["body"])["digest"]) == (200, digest)
    status, doc = call("GET", f"/v1/traces/{digest[:15]}/document")
    assert (status, json.loads(doc["body"])["digest"]) == (200, digest)
    assert call("GET", f"/v1/traces/{digest[:15]}", tenant="other")[0] == 404
    twin = {**header, "digest": digest[:15] + ("f" if digest[15] != "f" else "0") * 56}
    assert aws.container.traces.put_header("acme", twin)
    status, ambiguous = call("GET", f"/v1/traces/{digest[:15]}")
    assert status == 409
    assert json.loads(ambiguous["body"])["error"]["code"] == "ambiguous_digest"
    assert call("GET", f"/v1/traces/{digest}")[0] == 200
