"""Domain exceptions. Adapters raise these (`raise ... from exc`); `infercrane.http.errors` is the
one place that turns them into HTTP responses, and the CLI turns HTTP back into exit codes."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error the service reports on purpose. `message` never echoes submitted values."""

    code = "error"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code


class InvalidInput(DomainError):
    code = "invalid_input"


class BadRequest(DomainError):
    """The request as a whole cannot be read (not JSON, undecodable, wrong content type)."""

    code = "bad_request"


class MalformedRequest(BadRequest):
    """A request body that cannot be read at all (not JSON, not the protobuf its type says):
    HTTP 400. Here, the leaf layer, because both the HTTP edge (JSON) and an adapter (OTLP
    protobuf) raise it: one class, so the code is written once."""

    code = "invalid_json"


class PayloadTooLarge(DomainError):
    code = "payload_too_large"


class Unauthorized(DomainError):
    code = "unauthorized"


class Forbidden(DomainError):
    code = "forbidden"


class NotFound(DomainError):
    code = "not_found"


class Conflict(DomainError):
    code = "conflict"


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"


class RefusedBySafetyRule(DomainError):
    code = "refused"


class RateLimited(DomainError):
    """The tenant is over a rate: retry after `retry_after_s` seconds (429, `Retry-After`)."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DependencyUnavailable(DomainError):
    """An outside system (DynamoDB, SQS, a provider API) failed transiently; safe to retry."""

    code = "dependency_unavailable"


class VerificationFailed(DomainError):
    """A provider artifact exists but does not satisfy the binding/immutability contract."""

    code = "verification_failed"
