"""Refusals the first hostile suite missed (issue 26), through the real api and admin handlers
over moto: content types, non-finite and out-of-range times, text a store cannot hold, body-like
keys in every body, closed envelopes and duplicate keys. Each answers a 4xx in the envelope and
stores nothing; none is a 5xx."""

from __future__ import annotations

import json

import pytest

from tests.integration import test_hostile_input as hostile
from tests.integration.test_hostile_input import assert_envelope, call, stored_observations

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
