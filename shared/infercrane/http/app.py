"""The REST resolver shared by the api and admin functions."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from aws_lambda_powertools.utilities.typing import LambdaContext

from infercrane import __version__
from infercrane.domain.validation import refuse_body_keys
from infercrane.errors import DomainError, MalformedRequest
from infercrane.http import errors
from infercrane.http.body import (
    JSON_MEDIA_TYPES,
    PROTOBUF_MEDIA_TYPE,
    PROTOBUF_MEDIA_TYPES,
    UnsupportedMediaType,
    inflate_gzip,
    read_json,
)

# The one route that also reads protobuf (OTLP/HTTP); every other body is JSON.
PROTOBUF_ROUTES = frozenset({"/v1/otlp/v1/traces"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Batches whose items the domain checks one by one (a body-like key refuses its item, not the
# batch, and only an item the schema refuses is walked: capture's fast path); their envelopes are
# closed. OTLP keeps only allow-listed attributes (`domain/otlp.py`), whatever else a span holds.
# Every other body is walked here, once, at any depth.
PER_ITEM_ROUTES = frozenset({"/v1/observations", "/v1/otlp/v1/traces", "/v1/lifecycle-attempts"})


def _header(event: Mapping[str, Any], name: str) -> str:
    for key, value in (event.get("headers") or {}).items():
        if str(key).lower() == name:
            return str(value or "")
    return ""


class Checked(NamedTuple):
    """The event as routes will read it and, if it carried a JSON body, that body's text and the
    document parsed from it."""

    event: Mapping[str, Any]
    body: tuple[object, Any] | None = None


# Where the resolver hands the checked body to the routes: Powertools' per-request context, which
# every included router shares and which `resolve` clears after each request.
_CHECKED_BODY = "infercrane_checked_body"


def checked_json(router: BaseRouter) -> tuple[bool, Any]:
    """(True, document) when the body of `router`'s current event is the one the resolver checked
    and parsed (the same object, so no other text can match), else (False, None): a route reading
    that very text does not parse a 500-item batch a second time."""
    entry = router.context.get(_CHECKED_BODY)
    if entry is not None and entry[0] is router.current_event.body:
        return True, entry[1]
    return False, None


def request_json(router: BaseRouter) -> Any:
    """The route's JSON document: the one the resolver parsed, else its current body parsed here.
    The second case is a request without a body (an empty body is `invalid_json`) and a router
    that a later app included too: Powertools points a router's `context` at the last app that
    included it, while `current_event` stays the one being resolved, so the checked document is
    then not found and the checked text is parsed again (one more parse, the same answer)."""
    found, document = checked_json(router)
    if found:
        return document
    return read_json((router.current_event.body or "").encode("utf-8", "surrogatepass"))


def charge_work(event: Mapping[str, Any], body_bytes: int) -> None:
    """Charge the calling tenant's work bucket by its body as the function will read it (gzip
    inflated; domain/work.py); raises `RateLimited`. Requests without a tenant (admin, public
    routes) and bodies under 1 KiB are free."""
    tenant = ((event.get("requestContext") or {}).get("authorizer") or {}).get("tenant")
    if not isinstance(tenant, str) or not tenant:
        return
    from infercrane.bootstrap import get_container

    meter = get_container().work_meter
    if meter is not None:
        meter.charge(tenant, body_bytes)


def checked_event(event: Mapping[str, Any]) -> Checked:
    """The event with its JSON body checked (media type, size, UTF-8, depth, syntax) and, if it
    was gzip, inflated, with the document parsed from it; raises a `DomainError` (4xx) otherwise.
    Protobuf bodies are the OTLP route's own."""
    body = event.get("body")
    content_type = _header(event, "content-type").split(";")[0].strip().lower()
    if content_type in PROTOBUF_MEDIA_TYPES and event.get("resource") in PROTOBUF_ROUTES:
        charge_work(event, len(str(body)))
        return Checked(event)
    if content_type not in JSON_MEDIA_TYPES and (
            body or str(event.get("httpMethod", "")).upper() in _BODY_METHODS):
        # Before routing, so no route (nor Powertools' body parser) ever sees a body of another
        # type: a form or text body would otherwise reach a route as something it never checked.
        if event.get("resource") in PROTOBUF_ROUTES:
            raise UnsupportedMediaType("OTLP/HTTP bodies are application/json or "
                                       f"{PROTOBUF_MEDIA_TYPE}.")
        raise UnsupportedMediaType("The request body must be application/json.")
    if not body:
        return Checked(event)
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(str(body), validate=False)
        except (binascii.Error, ValueError):
            raise MalformedRequest("The request body could not be decoded.") from None
    else:
        raw = str(body).encode("utf-8", "surrogatepass")
    gzipped = _header(event, "content-encoding").strip().lower() == "gzip"
    if gzipped:
        raw = inflate_gzip(raw)
    document = read_json(raw)
    if event.get("resource") not in PER_ITEM_ROUTES:
        refuse_body_keys(document)
    # After the body check, so its refusals touch no store; by the bytes the route will read.
    charge_work(event, len(raw))
    if not gzipped and not event.get("isBase64Encoded"):
        return Checked(event, (body, document))
    text = raw.decode("utf-8")
    # Routes read JSON through Powertools' decoded text: hand them the checked UTF-8 text.
    headers = {k: v for k, v in (event.get("headers") or {}).items()
               if str(k).lower() != "content-encoding"}
    multi = {k: v for k, v in (event.get("multiValueHeaders") or {}).items()
             if str(k).lower() != "content-encoding"}
    return Checked({**event, "body": text, "isBase64Encoded": False, "headers": headers,
                    "multiValueHeaders": multi}, (text, document))


class Resolver(APIGatewayRestResolver):
    """The REST resolver with one check in front of routing: every JSON body is bounded in size
    and depth and valid UTF-8 JSON before any route, validation middleware or parser sees it."""

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        try:
            checked = checked_event(event)
        except DomainError as exc:
            return errors.proxy_error(exc)
        if checked.body is not None:
            self.append_context(**{_CHECKED_BODY: checked.body})
        try:
            return super().resolve(checked.event, context)
        finally:
            self.clear_context()  # as Powertools does after routing, and also when it fails before


def build_app(routers: Iterable[APIGatewayRouter], *, title: str) -> APIGatewayRestResolver:
    app = Resolver(enable_validation=True)
    errors.register(app)
    for router in routers:
        app.include_router(router)

    @app.get("/v1/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return with_media_type_refusals(
            json.loads(app.get_openapi_json_schema(title=title, version=__version__)))

    return app


_ENVELOPE_CONTENT = {"application/json": {"schema": {"type": "object", "required": ["error"]}}}


def with_media_type_refusals(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with the 415 `checked_event` answers on every method that carries a body
    (Powertools knows nothing of a check made before routing)."""
    for operations in doc.get("paths", {}).values():
        for method, operation in operations.items():
            if method.upper() in _BODY_METHODS:
                operation.setdefault("responses", {})["415"] = {
                    "description": "The body is not application/json (nor, on the OTLP route, "
                                   "protobuf): unsupported_media_type.",
                    "content": _ENVELOPE_CONTENT}
    return doc
