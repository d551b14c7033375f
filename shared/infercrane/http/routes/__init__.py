"""Tenant API routers, one module per capability area. The api function includes all of them.

The list is built on call, not at import: the admin function imports `infercrane.http.routes.admin`
(which runs this package's `__init__`) and must not pay for the tenant areas' routes, models and
domain imports on its cold start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.router import APIGatewayRouter


def routers() -> list[APIGatewayRouter]:
    """The api function's routers (template.yaml's `ApiFunction` events serve exactly these)."""
    from infercrane.http.routes import cache, capacity, capture, executions, traces

    return [traces.router, cache.router, capture.router, capacity.router, executions.router]

