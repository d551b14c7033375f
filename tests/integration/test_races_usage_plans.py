"""Usage-plan enrollment finds the tenant's API Gateway key by name and creates it if missing.
API Gateway refuses a second key with the same value (ConflictException, moto as AWS), which is
the condition: a racing first enrollment adopts the key the winner created, instead of failing
with a 503 as it did (moto's server, threads)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from infercrane.adapters.apigateway_usage import ApiGatewayUsagePlans
from infercrane.domain.tenancy import usage_identifier


def test_racing_first_enrollments_leave_one_key_enrolled_once(aws):
    apigw = aws.client("apigateway")
    plan = apigw.create_usage_plan(name="tenants", throttle={"rateLimit": 5.0, "burstLimit": 10})
    usage = ApiGatewayUsagePlans(apigw, plan["id"])
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda _: usage.enroll("acme", usage_identifier("acme")), range(6)))
    keys = apigw.get_api_keys(nameQuery="infercrane-acme")["items"]
    assert len(keys) == 1
    enrolled = apigw.get_usage_plan_keys(usagePlanId=plan["id"])["items"]
    assert [k["id"] for k in enrolled] == [keys[0]["id"]]
