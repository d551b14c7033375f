"""Who is calling. The tenant comes only from the authorizer context, never from the request."""

from __future__ import annotations

# Powertools' common base of the app (`APIGatewayRestResolver`) and the routers (`Router`): the
# routes pass their router, whose `current_event` is the app's.
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

from infercrane.errors import Forbidden, Unauthorized


def current_tenant(app: BaseRouter) -> str:
    context = (app.current_event.raw_event.get("requestContext") or {}).get("authorizer") or {}
    tenant = context.get("tenant")
    if not isinstance(tenant, str) or not tenant:
        raise Unauthorized("A valid API key is required.")
    return tenant


def require_admin(app: BaseRouter) -> str:
    """Admin routes are IAM-authorized by API Gateway (sigv4): the caller's ARN is present."""
    identity = (app.current_event.raw_event.get("requestContext") or {}).get("identity") or {}
    arn = identity.get("userArn") or identity.get("caller")
    if not isinstance(arn, str) or not arn:
        raise Forbidden("Admin routes require IAM authorization.")
    return arn
