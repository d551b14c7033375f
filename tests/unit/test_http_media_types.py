"""The media-type check made before routing (`http/app.checked_event`): what it refuses with 415,
what it lets through, and the OpenAPI document saying so. No I/O: events are dicts."""

from __future__ import annotations

from typing import Any

import pytest

from infercrane.http.app import checked_event, with_media_type_refusals
from infercrane.http.body import UnsupportedMediaType


def event(resource: str, content_type: str | None, body: str | None,
          method: str = "POST") -> dict[str, Any]:
    headers = {} if content_type is None else {"Content-Type": content_type}
    return {"resource": resource, "path": resource, "httpMethod": method, "headers": headers,
            "body": body, "isBase64Encoded": False}


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream",
                                          "application/x-protobuf", "application/xml",
                                          "multipart/form-data", "application/x-www-form-urlencoded"])
def test_a_body_of_another_media_type_is_refused_before_routing(content_type):
    with pytest.raises(UnsupportedMediaType):
        checked_event(event("/v1/traces", content_type, '{"window": "1h"}'))


def test_a_body_method_without_a_body_is_refused_for_its_declared_type():
    with pytest.raises(UnsupportedMediaType):
        checked_event(event("/v1/traces", "text/plain", None))


@pytest.mark.parametrize("content_type", [None, "", "application/json",
                                          "Application/JSON; charset=utf-8"])
def test_json_or_no_type_passes_on_to_the_json_checks(content_type):
    assert checked_event(event("/v1/traces", content_type, '{"window": "1h"}')).event["body"]


def test_protobuf_is_read_only_by_the_otlp_route():
    assert checked_event(event("/v1/otlp/v1/traces", "application/x-protobuf", "AAAA"))
    with pytest.raises(UnsupportedMediaType, match="OTLP/HTTP"):
        checked_event(event("/v1/otlp/v1/traces", "text/plain", "{}"))


def test_a_get_with_a_content_type_and_no_body_is_not_refused():
    assert checked_event(event("/v1/traces", "text/plain", None, method="GET"))


def test_the_openapi_document_names_the_415_of_every_body_method():
    doc = {"paths": {"/a": {"post": {"responses": {"200": {}}}, "get": {"responses": {}}},
                     "/b/{id}": {"put": {}}}}
    out = with_media_type_refusals(doc)
    assert "415" in out["paths"]["/a"]["post"]["responses"]
    assert "415" in out["paths"]["/b/{id}"]["put"]["responses"]
    assert "415" not in out["paths"]["/a"]["get"]["responses"]
