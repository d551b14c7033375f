"""API Gateway usage plans: one API key per tenant, enrolled in the tenant usage plan.

With `ApiKeySourceType: AUTHORIZER` the key value is never sent by a client: the authorizer
returns it as `usageIdentifierKey`, and API Gateway throttles each tenant by the plan's rate and
burst (429 beyond them). The key's value only names the tenant's bucket; authentication is the
bearer key checked by the authorizer.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable


class ApiGatewayUsagePlans:
    def __init__(self, client: Any, usage_plan_id: str):
        self._client = client
        self._plan = usage_plan_id

    def _key_id(self, tenant: str, usage_key: str) -> str:
        name = f"infercrane-{tenant}"
        found = self._find(name)
        if found is not None:
            return found
        try:
            created = self._client.create_api_key(name=name, value=usage_key, enabled=True,
                                                  description="InferCrane tenant usage identifier")
        except ClientError as exc:
            # API Gateway refuses a second key with the same value: a racing enrollment of the
            # same tenant created it between our lookup and our create. Use that one.
            if exc.response.get("Error", {}).get("Code") != "ConflictException":
                raise
            found = self._find(name)
            if found is None:
                raise
            return found
        return str(created["id"])

    def _find(self, name: str) -> str | None:
        for key in self._client.get_api_keys(nameQuery=name, includeValues=False).get("items", []):
            if key.get("name") == name:
                return str(key["id"])
        return None

    def enroll(self, tenant: str, usage_key: str) -> None:
        try:
            key_id = self._key_id(tenant, usage_key)
            try:
                self._client.create_usage_plan_key(usagePlanId=self._plan, keyId=key_id,
                                                   keyType="API_KEY")
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConflictException":
                    raise  # already enrolled is success
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("API Gateway is unavailable.") from exc
