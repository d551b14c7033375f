"""Admin enrolls each tenant's usage identifier in the tenant usage plan (moto's API Gateway)."""

from __future__ import annotations

from datetime import UTC, datetime

from infercrane.adapters.apigateway_usage import ApiGatewayUsagePlans
from infercrane.domain.tenancy import TenancyService, usage_identifier


def test_a_new_tenant_is_enrolled_once_with_the_identifier_its_authorizer_returns(aws):
    apigw = aws.client("apigateway")
    plan = apigw.create_usage_plan(name="tenants", throttle={"rateLimit": 5.0, "burstLimit": 10})
    usage = ApiGatewayUsagePlans(apigw, plan["id"])
    tenancy = TenancyService(aws.container.directory, aws.container.keyrings, usage)
    now = datetime.now(UTC)
    tenancy.create_tenant("acme", now)
    tenancy.ensure_tenant("acme", now)  # idempotent: no second key, no second enrollment
    tenancy.ensure_tenant("globex", now)
    keys = apigw.get_usage_plan_keys(usagePlanId=plan["id"])["items"]
    assert sorted(k["value"] for k in keys) == sorted(
        [usage_identifier("acme"), usage_identifier("globex")])
    assert len(apigw.get_api_keys()["items"]) == 2
