"""Tenant REST API. Each area's routes live in `infercrane.http.routes.<area>`; this handler only
resolves the request. The tenant is read from the authorizer context inside each route."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics

from infercrane.http.app import build_app
from infercrane.http.routes import routers

logger = Logger()
metrics = Metrics()
app = build_app(routers(), title="InferCrane replay and capacity intelligence API")


@metrics.log_metrics(capture_cold_start_metric=True)
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
