"""Lambda TOKEN authorizer: `Authorization: Bearer <key>` -> tenant in the request context.

Unknown, malformed and revoked keys all raise "Unauthorized" (API Gateway's 401). The policy allows
the whole API for this principal so a cached decision serves every route; each route then reads
the tenant from the context and scopes every read and write to it.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from infercrane.bootstrap import get_container
from infercrane.domain.tenancy import usage_identifier
from infercrane.errors import Unauthorized

logger = Logger()


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    token = str(event.get("authorizationToken") or "")
    scheme, _, key = token.partition(" ")
    try:
        if scheme.lower() != "bearer":
            raise Unauthorized("A valid API key is required.")
        principal = get_container().authenticator.authenticate(key.strip())
    except Unauthorized:
        logger.info("authorization refused")
        raise Exception("Unauthorized") from None
    arn = str(event.get("methodArn", "*"))
    api_root = "/".join(arn.split("/")[:2]) + "/*" if "/" in arn else arn
    return {
        "principalId": f"{principal.tenant}/{principal.key_id}",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": "Allow",
                           "Resource": api_root}],
        },
        "context": {"tenant": principal.tenant, "key_id": principal.key_id},
        # ApiKeySourceType AUTHORIZER: the tenant's usage plan bucket (per-tenant throttling).
        "usageIdentifierKey": usage_identifier(principal.tenant),
    }
