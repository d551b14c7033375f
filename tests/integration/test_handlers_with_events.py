"""The events/*.json files that `sam local invoke` uses drive the same handlers here."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REPO, load_event

CONTEXT = SimpleNamespace(function_name="fn", memory_limit_in_mb=512, aws_request_id="req-1",
                          invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:fn")


def handler(name: str):
    spec = importlib.util.spec_from_file_location(f"_test_fn_{name}", REPO / "functions" / name / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


def test_authorizer_allows_a_valid_key_and_puts_the_tenant_in_the_context(aws):
    issued = aws.container.tenancy.create_tenant("acme", datetime.now(UTC))
    event = load_event("authorizer_token.json") | {"authorizationToken": f"Bearer {issued.raw_key}"}
    policy = handler("authorizer")(event, CONTEXT)
    assert policy["context"] == {"tenant": "acme", "key_id": issued.key_id}
    assert policy["policyDocument"]["Statement"][0]["Effect"] == "Allow"
    assert policy["policyDocument"]["Statement"][0]["Resource"].endswith("abcdef1234/prod/*")
    # Per-tenant throttling: the tenant's usage plan bucket, never one shared by tenants.
    assert policy["usageIdentifierKey"] == "infercrane-tenant-usage-acme"


@pytest.mark.parametrize("token", ["", "Bearer", "Basic abc", "Bearer ick_000000000000_" + "a" * 43])
def test_authorizer_answers_unauthorized_for_bad_tokens(aws, token):
    event = load_event("authorizer_token.json") | {"authorizationToken": token}
    with pytest.raises(Exception, match="^Unauthorized$"):
        handler("authorizer")(event, CONTEXT)


def test_api_serves_its_openapi_document(aws):
    response = handler("api")(load_event("api_openapi.json"), CONTEXT)
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["openapi"].startswith("3.")


def test_admin_creates_a_tenant_from_the_sam_event(aws):
    response = handler("admin")(load_event("admin_create_tenant.json"), CONTEXT)
    assert response["statusCode"] == 201
    body = json.loads(response["body"])
    assert body["tenant"] == "acme" and body["api_key"].startswith("ick_")


def test_admin_refuses_a_request_without_an_iam_identity(aws):
    event = load_event("admin_create_tenant.json")
    event["requestContext"]["identity"] = {"sourceIp": "127.0.0.1"}
    response = handler("admin")(event, CONTEXT)
    assert response["statusCode"] == 403
    assert json.loads(response["body"])["error"]["code"] == "forbidden"


def test_admin_names_the_field_of_a_bad_body_without_echoing_it(aws):
    event = load_event("admin_create_tenant.json")
    event["body"] = json.dumps({"name": "CANARY_Not_A_Name"})
    response = handler("admin")(event, CONTEXT)
    assert response["statusCode"] == 422
    error = json.loads(response["body"])["error"]
    assert error["field"] == "name" and "CANARY" not in response["body"]


def test_admin_answers_400_for_a_body_that_is_not_json(aws):
    event = load_event("admin_create_tenant.json")
    event["body"] = "{not json"
    response = handler("admin")(event, CONTEXT)
    assert response["statusCode"] == 400
    assert json.loads(response["body"])["error"]["code"] == "invalid_json"


def test_events_folder_is_valid_json():
    for path in Path(REPO / "events").glob("*.json"):
        json.loads(path.read_text())
