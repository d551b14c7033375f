"""The one module that turns domain exceptions into HTTP responses (the conventions' envelope).

Messages never echo submitted values: pydantic errors are reduced to their location and a fixed
sentence per error type, and 500s carry only a request id.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from infercrane import errors
from infercrane.domain.validation import error_location, fixed_sentence
from infercrane.http.body import UnsupportedMediaType

logger = Logger(child=True)

STATUS: dict[type[errors.DomainError], int] = {
    UnsupportedMediaType: 415,
    errors.InvalidInput: 422,
    errors.BadRequest: 400,
    errors.PayloadTooLarge: 413,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.IdempotencyConflict: 409,
    errors.Conflict: 409,
    errors.RefusedBySafetyRule: 409,
    errors.VerificationFailed: 422,
    errors.DependencyUnavailable: 503,
    errors.RateLimited: 429,
}


def status_for(exc: errors.DomainError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps({"error": {"code": code, "message": message, "field": field}}),
        headers=headers,
    )


def proxy_error(exc: errors.DomainError) -> dict[str, Any]:
    """The envelope as an API Gateway proxy response, for refusals made before routing."""
    body = json.dumps({"error": {"code": exc.code, "message": exc.message, "field": exc.field}})
    headers = {"Content-Type": "application/json"}
    if isinstance(exc, errors.RateLimited):  # the conventions' 429: when to come back
        headers["Retry-After"] = str(exc.retry_after_s)
    return {"statusCode": status_for(exc), "headers": headers,
            "multiValueHeaders": {}, "body": body, "isBase64Encoded": False}


def describe_validation_error(err: dict[str, Any]) -> str:
    """A sentence for one pydantic error that never contains the submitted value."""
    kind = str(err.get("type", ""))
    if kind == "value_error":
        # Our own validators raise ValueError with fixed sentences (no values): keep those.
        ctx = err.get("ctx") or {}
        inner = ctx.get("error")
        if inner is not None:
            return str(inner)
    return fixed_sentence(kind)


def register(app: APIGatewayRestResolver) -> None:
    @app.exception_handler(errors.DomainError)
    def _domain(exc: errors.DomainError) -> Response:
        return error_response(status_for(exc), exc.code, exc.message, exc.field)

    @app.exception_handler(RequestUnsupportedContentType)
    def _media_type(_: Exception) -> Response:
        # `http/app.py` refuses other media types before routing; this keeps Powertools' own
        # refusal (a body type its parser does not read) a 415 in the envelope, never a 500.
        return error_response(415, UnsupportedMediaType.code,
                              "The request body must be application/json.")

    @app.exception_handler(RequestValidationError)
    def _validation(exc: RequestValidationError) -> Response:
        errs = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errs):
            return error_response(400, errors.MalformedRequest.code,
                                  "The request body is not valid JSON.")
        first = errs[0] if errs else {}
        return error_response(422, "invalid_input", describe_validation_error(first),
                              error_location(first))

    @app.not_found
    def _not_found(_: Exception) -> Response:
        return error_response(404, "not_found", "No such route.")

    @app.exception_handler(Exception)
    def _bug(exc: Exception) -> Response:
        # A 500 is a bug. Log the exception type and traceback, never the request (it may carry a
        # body), and give the caller only the request id to quote.
        request_id = app.current_event.request_context.request_id
        logger.exception("unhandled error", extra={"error_type": type(exc).__name__})
        return error_response(500, "internal_error",
                              f"Internal error; quote request id {request_id}.")
