"""Refusals the first hostile suite missed (issue 26), through the real api and admin handlers
over moto: content types, non-finite and out-of-range times, text a store cannot hold, body-like
keys in every body, closed envelopes and duplicate keys. Each answers a 4xx in the envelope and
stores nothing; none is a 5xx."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from infercrane.errors import InvalidInput
from infercrane.http.errors import status_for
from tests.integration import test_hostile_input as hostile
from tests.integration.test_hostile_input import CANARY, assert_envelope, call, stored_observations

# The first hostile suite's fixtures: a stack-free handler, and a tenant on moto.
no_stack = hostile.no_stack
tenant = hostile.tenant

MODEL = "sha256:" + "a" * 64
IMPORT = {"deployment": "coder", "import_id": "imp-" + "0" * 24, "file_sha256": "1" * 64,
          "format": "azure-csv", "records": 1}

# Every route that reads a JSON body, with a body it would accept or refuse for its content.
BODY_ROUTES = [
    ("api", "POST", "/v1/observations", {"items": []}),
    ("api", "POST", "/v1/otlp/v1/traces", {"resourceSpans": []}),
    ("api", "POST", "/v1/traces", {"deployment": "coder", "window": "24h"}),
    ("api", "POST", "/v1/trace-comparisons", {"a": "abcdef", "b": "abcdef"}),
    ("api", "PUT", "/v1/deployments/coder/revisions/r1", {"url": "http://x.test"}),
    ("api", "POST", "/v1/executions", {"schema": "x"}),
    ("api", "POST", "/v1/lifecycle-attempts", {"items": []}),
    ("api", "POST", "/v1/imports", IMPORT),
    ("api", "POST", "/v1/cache-observations", {"model": MODEL}),
    ("api", "POST", "/v1/prefetch-requests", {"model": MODEL}),
    ("api", "POST", "/v1/prefetch-requests/pf_" + "0" * 32 + "_1/status", {"status": "failed"}),
    ("api", "PUT", "/v1/prefetch-requests/pf_" + "0" * 32 + "_1/resources/volume",
     {"value": "vol-1"}),
    ("admin", "POST", "/v1/admin/tenants", {"name": "acme"}),
    ("admin", "POST", "/v1/admin/tenants/acme/hmac-keys", {"purpose": "identity"}),
]
NOT_JSON = ["text/plain", "application/octet-stream", "application/x-protobuf",
            "application/x-www-form-urlencoded", "text/plain; charset=utf-8"]


@pytest.mark.parametrize(("function", "method", "path", "body"), BODY_ROUTES,
                         ids=[f"{m} {p}" for _, m, p, _ in BODY_ROUTES])
def test_a_non_json_body_is_a_415_on_every_json_route(tenant, function, method, path, body):
    for content_type in NOT_JSON:
        if path == "/v1/otlp/v1/traces" and content_type == "application/x-protobuf":
            continue  # the one route that reads protobuf
        status, doc = call(function, method, path, json.dumps(body),
                           headers={"Content-Type": content_type})
        assert_envelope(status, doc, 415)
        assert doc["error"]["code"] == "unsupported_media_type", (content_type, doc)
    assert stored_observations(tenant) == 0


def test_powertools_own_media_type_refusal_is_a_415_in_the_envelope(tenant):
    # A body-less POST to a route with a body model: Powertools' parser refuses the type itself.
    status, doc = call("api", "POST", "/v1/traces", None, headers={"Content-Type": "text/plain"})
    assert_envelope(status, doc, 415)


NOT_JSON_BODIES = {
    "duplicate_key": '{"deployment": "coder", "window": "24h", "window": "1h"}',
    "nested_duplicate_key": '{"items": [{"a": 1, "a": 2}]}',
    "nan": '{"items": [NaN]}',
    "infinity": '{"items": [Infinity]}',
    "minus_infinity": '{"items": [-Infinity]}',
    "overflowing_float": '{"items": [1e400]}',
    "lone_surrogate": '{"items": ["\\ud800' + CANARY + '"]}',
    "lone_low_surrogate_key": '{"\\udc00": 1}',
}


@pytest.mark.parametrize(("function", "method", "path", "_"), BODY_ROUTES,
                         ids=[f"{m} {p}" for _, m, p, _ in BODY_ROUTES])
def test_duplicate_keys_non_finite_numbers_and_lone_surrogates_are_a_400(no_stack, function,
                                                                          method, path, _):
    for case, body in NOT_JSON_BODIES.items():
        status, doc = call(function, method, path, body)
        assert_envelope(status, doc, 400)
        assert doc["error"]["code"] in ("duplicate_key", "non_finite_number",
                                        "invalid_encoding"), (case, doc)


def test_a_surrogate_pair_is_text_not_a_refusal(tenant):
    body = '{"items": [], "x": "\\ud83d\\ude00"}'  # a valid pair: refused only as an unknown key
    status, doc = call("api", "POST", "/v1/observations", body)
    assert_envelope(status, doc, 422)
    assert doc["error"]["code"] == "unknown_field"


def test_the_batch_envelopes_are_closed(tenant):
    for path in ("/v1/observations", "/v1/lifecycle-attempts"):
        status, doc = call("api", "POST", path, json.dumps({"items": [], "prompt": CANARY}))
        assert_envelope(status, doc, 422)
        assert (doc["error"]["code"], doc["error"]["field"]) == ("body_field_refused", "prompt")
        status, doc = call("api", "POST", path, json.dumps({"items": [], CANARY: 1}))
        assert_envelope(status, doc, 422)
        assert doc["error"]["code"] == "unknown_field" and doc["error"]["field"] is None


# A body-like key at any depth of every other body (the batches refuse it per item).
BODY_KEY_CASES = [
    ("POST", "/v1/cache-observations",
     {"model": MODEL, "adapter": "aws", "location": "us-east-1a", "state": "present",
      "observed_at": "2026-12-01T00:00:00Z", "evidence": {"prompt": CANARY}}),
    ("POST", "/v1/cache-observations",
     {"model": MODEL, "adapter": "aws", "location": "us-east-1a", "state": "present",
      "observed_at": "2026-12-01T00:00:00Z", "evidence": {"Messages": CANARY}}),
    ("POST", "/v1/imports", IMPORT | {"options": {"messages": [CANARY]}}),
    ("POST", "/v1/imports", IMPORT | {"options": {"timing_model": {"Prompt": CANARY}}}),
    ("PUT", "/v1/prefetch-requests/pf_" + "0" * 32 + "_1/resources/volume",
     {"value": "vol-1", "output": CANARY}),
    ("POST", "/v1/prefetch-requests/pf_" + "0" * 32 + "_1/status",
     {"status": "failed", "context": {"a": CANARY}}),
    ("POST", "/v1/prefetch-requests", {"model": MODEL, "request": {"body": CANARY}}),
    ("PUT", "/v1/deployments/coder/revisions/r1", {"url": "http://x.test", "system": CANARY}),
    ("POST", "/v1/executions", {"schema": "x", "a": [{"b": {"completion": CANARY}}]}),
    ("POST", "/v1/traces", {"deployment": "coder", "window": "24h", "query": CANARY}),
]


@pytest.mark.parametrize(("method", "path", "body"), BODY_KEY_CASES)
def test_body_like_keys_are_refused_at_any_depth_of_every_body(tenant, method, path, body):
    status, doc = call("api", method, path, json.dumps(body))
    assert_envelope(status, doc, 422)
    assert doc["error"]["code"] == "body_field_refused", doc
    assert doc["error"]["field"] in ("prompt", "messages", "output", "context", "request",
                                     "system", "completion", "query")


def _otlp(start: object, end: object, ttft: dict[str, Any] | None = None) -> str:
    attributes = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                  {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "10"}},
                  {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "5"}}]
    if ttft is not None:
        attributes.append({"key": "ttft", "value": ttft})
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat",
            "startTimeUnixNano": start, "endTimeUnixNano": end, "attributes": attributes}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "coder"}}]},
        "scopeSpans": [{"spans": [span]}]}]})


NOW_NS = str(int(datetime.now(UTC).timestamp()) * 10**9)
OTLP_TIMES = [("Infinity", "Infinity"), ("NaN", NOW_NS), (1e300, 1e300), (NOW_NS, "9" * 400),
              ("9" * 400, NOW_NS), (NOW_NS, 1e300), (-1, NOW_NS)]


# Fixed ids: ids made from NOW_NS differ between xdist workers that collect either side of a
# second, and xdist then refuses the run ("Different tests were collected").
@pytest.mark.parametrize(("start", "end"), OTLP_TIMES, ids=[
    "inf-inf", "nan-now", "1e300-1e300", "now-400digits", "400digits-now", "now-1e300",
    "negative-now"])
def test_otlp_span_times_that_no_clock_holds_reject_the_span_not_the_service(tenant, start, end):
    status, doc = call("api", "POST", "/v1/otlp/v1/traces", _otlp(start, end))
    assert status == 200, doc
    assert (doc["accepted"], doc["rejected"]) == (0, 1), doc
    assert stored_observations(tenant) == 0


def test_an_otlp_ttft_attribute_no_float_holds_rejects_the_span(tenant):
    body = _otlp(NOW_NS, NOW_NS, ttft={"intValue": "9" * 400})
    status, doc = call("api", "POST", "/v1/otlp/v1/traces", body,
                       query={"ttft_attribute": "ttft"})
    assert status == 200 and (doc["accepted"], doc["rejected"]) == (0, 1), doc


@pytest.mark.parametrize("moment", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00",
                                    "1999-12-31T23:59:59Z", "2999-01-01T00:00:00Z"])
def test_import_arrivals_and_start_obey_the_time_bounds(tenant, moment):
    for field in ("first_arrival", "last_arrival"):
        status, doc = call("api", "POST", "/v1/imports", json.dumps(IMPORT | {field: moment}))
        assert_envelope(status, doc, 422)
        assert doc["error"]["field"] == field
    status, doc = call("api", "POST", "/v1/imports",
                       json.dumps(IMPORT | {"options": {"start": moment}}))
    assert_envelope(status, doc, 422)
    assert doc["error"]["field"] == "options.start"


def test_lifecycle_finish_times_obey_the_time_bounds(tenant):
    attempt = {"attempt_id": "a1", "deployment": "coder", "operation": "create",
               "adapter": "aws", "runtime": "vllm", "compute_mode": "on-demand",
               "region": "us-east-1", "gpu": "h100", "gpu_count": 1,
               "started_at": "2026-12-01T00:00:00Z", "outcome": "failed"}
    for moment in ("9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"):
        status, doc = call("api", "POST", "/v1/lifecycle-attempts",
                           json.dumps({"items": [attempt | {"finished_at": moment}]}))
        assert status == 200 and doc["rejected"] == 1, doc
        assert doc["errors"][0]["field"] == "finished_at"


LONE = "\ud800"  # as a provider or an in-AWS caller could hand it over, past the JSON parser


def test_unstorable_text_is_invalid_input_before_any_store(tenant):
    c, now = tenant.container, datetime.now(UTC)
    with pytest.raises(InvalidInput) as refused:
        c.cache.report("acme", MODEL, "aws", "us-east-1a", "present", {"k": "x" + LONE}, now)
    assert refused.value.field == "evidence.k"
    with pytest.raises(InvalidInput):
        c.prefetch.request("acme", MODEL, "aws", "us-east-1a", "snap-1" + LONE)
    attempt = {"attempt_id": "a1", "deployment": "coder", "operation": "create",
               "adapter": "aws", "runtime": "vllm", "compute_mode": "on-demand",
               "region": "us-east-1", "gpu": "h100", "gpu_count": 1,
               "started_at": now.isoformat(), "outcome": "failed", "error_message": LONE}
    result = c.capacity.ingest("acme", [attempt], now).to_document()
    assert (result["accepted"], result["rejected"]) == (0, 1), result
    assert (result["errors"][0]["field"], result["errors"][0]["code"]) == ("error_message",
                                                                          "invalid_format")


def test_a_store_refusing_content_is_a_422_not_an_outage(tenant):
    # The net under validation: DynamoDB's ValidationException (here an item over 400 KB) is the
    # caller's content, which a retry cannot fix; 503 would be retried forever and page someone.
    c, now = tenant.container, datetime.now(UTC)
    obs = c.cache.report("acme", MODEL, "aws", "us-east-1a", "present", {"k": "v"}, now)
    oversized = dataclasses.replace(obs, evidence={f"k{i}": "z" * 20_000 for i in range(30)})
    with pytest.raises(InvalidInput) as refused:
        tenant.container.cache_store.put_observation(oversized, sweep_due=None)
    assert refused.value.code == "unstorable_content"
    assert status_for(refused.value) == 422


def test_a_resource_under_a_body_like_key_is_refused(tenant):
    status, doc = call("api", "PUT", "/v1/prefetch-requests/pf_" + "0" * 32 + "_1/resources/prompt",
                       json.dumps({"value": CANARY}))
    assert_envelope(status, doc, 422)
    assert (doc["error"]["code"], doc["error"]["field"]) == ("body_field_refused", "key")


@pytest.mark.parametrize("url", ["http://x.test/the prompt was", "http://x.test/é",
                                 "http://x.test/\t"])
def test_a_revision_url_is_an_address_not_text(tenant, url):
    status, doc = call("api", "PUT", "/v1/deployments/coder/revisions/r1",
                       json.dumps({"url": url}))
    assert_envelope(status, doc, 422)
    assert doc["error"]["field"] == "url"


@pytest.mark.parametrize("content_type", ["application/json", "", "application/x-protobuf",
                                          "application/octet-stream"])
def test_a_lifecycle_body_that_is_not_utf8_is_a_4xx_whatever_its_type(no_stack, content_type):
    headers = {"Content-Type": content_type} if content_type else {"Content-Type": ""}
    status, doc = call("api", "POST", "/v1/lifecycle-attempts",
                       b'{"items": [{"error_message": "\xff\xfe' + CANARY.encode() + b'"}]}',
                       headers=headers)
    assert_envelope(status, doc, (400, 415))


def test_a_lifecycle_batch_without_a_body_is_a_400(no_stack):
    status, doc = call("api", "POST", "/v1/lifecycle-attempts", None)
    assert_envelope(status, doc, 400)


def test_cache_evidence_under_a_body_like_key_is_refused_whoever_reports_it(tenant):
    # The in-AWS adapters report through the domain, not HTTP: the same check applies.
    with pytest.raises(InvalidInput) as refused:
        tenant.container.cache.report("acme", MODEL, "aws", "us-east-1a", "present",
                                      {"Prompt": CANARY}, datetime.now(UTC))
    assert (refused.value.code, refused.value.field) == ("body_field_refused", "prompt")
