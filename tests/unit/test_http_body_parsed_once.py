"""A JSON body is parsed once per invocation: the resolver hands the document it checked to the
route that reads that very body text (through Powertools' per-request context), and the request
after it starts without one."""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from infercrane.http import app as http_app
from infercrane.http.app import build_app, checked_json

DOC = {"items": [{"deployment": "chat", "input_tokens": 1}]}


def event(body: str | None, base64_encoded: bool = False, **headers: str) -> dict[str, Any]:
    # No tenant in the authorizer context: the work meter is not asked (http/app.charge_work).
    return {"httpMethod": "POST", "path": "/v1/probe", "resource": "/v1/probe",
            "headers": {"Content-Type": "application/json", **headers},
            "multiValueHeaders": {}, "requestContext": {"requestId": "r1"},
            "body": body, "isBase64Encoded": base64_encoded}


@dataclass
class Probe:
    """An app with one route that records what `checked_json` gives it and the body text it
    reads, and every document the resolver parsed."""

    router: APIGatewayRouter = field(default_factory=APIGatewayRouter)
    seen: list[tuple[tuple[bool, Any], str | None]] = field(default_factory=list)
    parsed: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        @self.router.post("/v1/probe")
        def post_probe() -> dict[str, Any]:
            self.seen.append((checked_json(self.router), self.router.current_event.body))
            return {}

        self.app = build_app([self.router], title="t")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Probe:
    found = Probe()
    real = http_app.read_json

    def read_json(raw: bytes) -> Any:
        found.parsed.append(real(raw))
        return found.parsed[-1]

    monkeypatch.setattr(http_app, "read_json", read_json)
    return found


def test_the_route_gets_the_document_the_resolver_parsed_not_a_second_parse(probe):
    assert probe.app.resolve(event(json.dumps(DOC)), None)["statusCode"] == 200
    [((found, document), _)] = probe.seen
    assert found and document == DOC
    assert len(probe.parsed) == 1 and document is probe.parsed[0]


def test_a_gzip_body_is_handed_over_inflated_and_parsed(probe):
    raw = base64.b64encode(gzip.compress(json.dumps(DOC).encode())).decode()
    probe.app.resolve(event(raw, True, **{"Content-Encoding": "gzip"}), None)
    [((found, document), text)] = probe.seen
    assert found and document == DOC
    assert json.loads(text) == DOC  # the route reads the inflated text, not the base64 gzip


def test_a_request_without_a_body_gets_no_document_after_one_with_a_body(probe):
    probe.app.resolve(event(json.dumps(DOC)), None)
    probe.app.resolve(event(None), None)
    assert probe.seen[1][0] == (False, None)


def test_nothing_outside_the_invocation_sees_its_body(probe):
    probe.app.resolve(event(json.dumps(DOC)), None)
    # Powertools keeps the last event as the routers' current one; its checked body is gone.
    assert probe.router.current_event.body is probe.seen[0][1]
    assert checked_json(probe.router) == (False, None)


def test_a_router_a_later_app_also_included_still_gets_its_document() -> None:
    # Powertools points a router's context at the last app that included it (the API's OpenAPI
    # test builds a second app from the same routers): the first app's route must still read
    # the body it was sent, parsed again, never an empty one (a 400 invalid_json).
    from infercrane.http.app import request_json

    router = APIGatewayRouter()
    got: list[Any] = []

    @router.post("/v1/probe")
    def post_probe() -> dict[str, Any]:
        got.append(request_json(router))
        return {}

    first = build_app([router], title="t")
    build_app([router], title="t")  # the later app: the router's context is now its
    response = first.resolve(event(json.dumps(DOC)), None)  # type: ignore[arg-type]
    assert response["statusCode"] == 200, response
    assert got == [DOC]
