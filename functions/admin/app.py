"""Admin REST API: tenants, API keys, HMAC key rotation, DLQ inspection and redrive."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from infercrane.http.app import build_app
from infercrane.http.routes import admin

logger = Logger()
app = build_app([admin.router], title="InferCrane admin API")


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
