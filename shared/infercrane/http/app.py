"""The REST resolver shared by the api and admin functions."""

from __future__ import annotations

from collections.abc import Iterable

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from infercrane import __version__
from infercrane.http import errors


def build_app(routers: Iterable[APIGatewayRouter], *, title: str) -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True)
    errors.register(app)
    for router in routers:
        app.include_router(router)

    @app.get("/v1/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, object]:
        import json

        return json.loads(app.get_openapi_json_schema(title=title, version=__version__))

    return app
