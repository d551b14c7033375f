"""Per-tenant rate limits in the local gateway: the template's usage plan, per usage identifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infercrane.domain.tenancy import usage_identifier
from infercrane.local.gateway import Gateway
from infercrane.local.template import ApiRoute, load
from infercrane.local.throttle import TokenBuckets


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Authorizer:
    """Stands in for the authorizer function: `Bearer <tenant>` -> that tenant."""

    def invoke(self, event: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        tenant = event["authorizationToken"].split(" ", 1)[1]
        return {"principalId": tenant,
                "policyDocument": {"Statement": [{"Effect": "Allow"}]},
                "context": {"tenant": tenant, "key_id": "k1"},
                "usageIdentifierKey": usage_identifier(tenant)}


class Api:
    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, event: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        self.calls += 1
        return {"statusCode": 200, "body": "{}"}


def gateway(rate: float, burst: float, clock: Clock) -> tuple[Gateway, Api]:
    api = Api()
    routes = [ApiRoute("ApiFunction", "GET", "/v1/traces", "default"),
              ApiRoute("ApiFunction", "GET", "/v1/openapi.json", "NONE")]
    gw = Gateway(routes, {"Auth": Authorizer(), "ApiFunction": api},  # type: ignore[dict-item]
                 "Auth", "admin", throttle=TokenBuckets(rate, burst, clock))
    return gw, api


def get(gw: Gateway, tenant: str, path: str = "/v1/traces") -> tuple[int, dict[str, str], Any]:
    status, headers, body = gw.handle("GET", path, {"authorization": f"Bearer {tenant}"}, b"")
    return status, headers, json.loads(body)


def test_a_tenant_over_its_burst_gets_429_with_retry_after_in_the_error_envelope():
    clock = Clock()
    gw, api = gateway(rate=0.5, burst=2, clock=clock)
    assert [get(gw, "flood")[0] for _ in range(2)] == [200, 200]
    status, headers, body = get(gw, "flood")
    assert status == 429
    assert headers["Retry-After"] == "2"  # one token at 0.5/s
    assert body["error"]["code"] == "rate_limited"
    assert set(body["error"]) == {"code", "message", "field"}
    assert api.calls == 2  # a throttled request never reaches the function


def test_one_tenants_flood_leaves_another_tenants_bucket_untouched():
    clock = Clock()
    gw, _ = gateway(rate=1, burst=3, clock=clock)
    flood = [get(gw, "flood")[0] for _ in range(50)]
    assert flood.count(200) == 3
    assert [get(gw, "quiet")[0] for _ in range(3)] == [200, 200, 200]


def test_the_bucket_refills_at_the_plan_rate():
    clock = Clock()
    gw, _ = gateway(rate=2, burst=1, clock=clock)
    assert get(gw, "t")[0] == 200
    assert get(gw, "t")[0] == 429
    clock.t += 0.5
    assert get(gw, "t")[0] == 200


def test_unauthenticated_routes_are_not_throttled():
    clock = Clock()
    gw, _ = gateway(rate=1, burst=1, clock=clock)
    assert [gw.handle("GET", "/v1/openapi.json", {}, b"")[0] for _ in range(5)] == [200] * 5


def test_the_local_gateway_takes_its_numbers_from_the_templates_usage_plan(template_path: Path):
    stack_template = load(template_path)
    plan = next(r for r in stack_template.resources.values()
                if r["Type"] == "AWS::ApiGateway::UsagePlan")
    assert plan["Properties"]["Throttle"] == {"RateLimit": {"Ref": "TenantRateLimit"},
                                              "BurstLimit": {"Ref": "TenantBurstLimit"}}
    params = stack_template.parameters
    assert stack_template.tenant_throttle == (float(params["TenantRateLimit"]),
                                              float(params["TenantBurstLimit"]))
    api = next(r for r in stack_template.resources.values()
               if r["Type"] == "AWS::Serverless::Api")["Properties"]
    assert api["ApiKeySourceType"] == "AUTHORIZER"
    assert api["Auth"]["ApiKeyRequired"] is True
