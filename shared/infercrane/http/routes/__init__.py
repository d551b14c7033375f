"""Tenant API routers, one module per capability area. The api function includes all of them."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from infercrane.http.routes import cache, capacity, capture, executions, traces

ROUTERS: list[APIGatewayRouter] = [traces.router, cache.router, capture.router, capacity.router,
                                   executions.router]
