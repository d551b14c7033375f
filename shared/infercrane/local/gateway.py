"""A local API Gateway: HTTP -> authorizer -> API Gateway REST (v1) proxy event -> handler.

Routes, their authorization type and the authorizer all come from template.yaml. Like API
Gateway: a missing Authorization header is a 401 without calling the authorizer, an authorizer
"Unauthorized" is a 401, an Allow decision is cached per Authorization header for the template's
`ReauthorizeEvery` seconds (only one whose policy covers every route, so a cached decision never
serves a route a fresh one would refuse), an unknown route is a 404, bodies over 10 MB are a 413,
and binary bodies reach the handler base64-encoded. Its limits answer as API Gateway would, in the
error envelope: an integration that runs past 29 s or past its function's Timeout is a 504, an event over
Lambda's 6 MB synchronous payload is a 413, and a failed function (error, crash, memory, a
response over 6 MB or not a proxy response) is a 502.

`AWS_IAM` routes (admin) take the stack's admin key by default; with an `iam` verifier (`infercrane
local serve --admin-auth iam`) they take only a valid SigV4 signature, and refusals are 403
`signature_required` / `signature_denied` as template.yaml's gateway responses answer in AWS.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from infercrane.local.counting import RequestCounts
from infercrane.local.runtime import FunctionError, FunctionPool, FunctionTimeout, PayloadTooLarge
from infercrane.local.sigv4 import SignatureRefused, SigV4Verifier
from infercrane.local.template import ApiRoute
from infercrane.local.throttle import TokenBuckets

log = logging.getLogger("infercrane.local")
MAX_BODY = 10 * 1024 * 1024  # API Gateway's request payload limit
INTEGRATION_TIMEOUT_S = 29.0  # API Gateway's (REST) integration timeout
_TEXT_TYPES = ("application/json", "text/", "application/x-www-form-urlencoded")
_LENGTH = re.compile(r"^[0-9]{1,19}$")  # a Content-Length: digits only (no sign, no spaces)
_STDLIB_REFUSALS = {
    414: ("uri_too_long", "The request URI is too long."),
    431: ("headers_too_large", "The request headers are too large."),
}
MAX_CACHED_DECISIONS = 1024  # distinct Authorization headers remembered at once


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _envelope(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()


class Gateway:
    def __init__(self, routes: list[ApiRoute], pools: dict[str, FunctionPool],
                 authorizer: str | None, admin_key: str, stage: str = "prod",
                 local_routes: dict[str, Callable[[str, bytes], tuple[int, Any]]] | None = None,
                 iam: SigV4Verifier | None = None, throttle: TokenBuckets | None = None,
                 authorizer_ttl_s: float = 0.0, counts: RequestCounts | None = None):
        self.iam = iam
        self.counts = counts  # `local serve --count-requests`: requests that reach a function
        # Authorizer decisions by Authorization header: (expiry on the monotonic clock, decision).
        self.authorizer_ttl_s = authorizer_ttl_s
        self._decisions: dict[str, tuple[float, dict[str, Any]]] = {}
        self._decisions_lock = threading.Lock()
        self._flights: dict[str, threading.Lock] = {}
        # The tenant usage plan (template.yaml), per usageIdentifierKey from the authorizer.
        self.throttle = throttle
        self.routes = routes
        self.pools = pools
        self.authorizer = authorizer
        self.admin_key = admin_key
        self.stage = stage
        self.local_routes = local_routes or {}
        self.api_id = "local"

    def match(self, method: str, path: str) -> tuple[ApiRoute, dict[str, str]] | None:
        for route in self.routes:
            params = route.matches(method, path)
            if params is not None:
                return route, params
        return None

    def _is_admin_key(self, key: str) -> bool:
        # Bytes, so a key with non-ASCII characters is a refusal rather than a TypeError (500).
        return hmac.compare_digest(key.strip().encode("utf-8", "replace"),
                                   self.admin_key.encode("utf-8"))

    def authorize(self, route: ApiRoute, headers: dict[str, str], method: str = "",
                  target: str = "", body: bytes = b"") -> tuple[int, dict[str, Any]]:
        """(status, requestContext additions); status 0 means allowed. A 403 carries its
        envelope's code and message under "refused"."""
        token = headers.get("authorization")
        if route.auth == "NONE":
            return 0, {}
        if route.auth == "AWS_IAM" and self.iam is not None:
            try:
                return 0, {"identity": self.iam.verify(method, target, headers, body)}
            except SignatureRefused as exc:
                return 403, {"refused": (exc.code, exc.message)}
        if route.auth == "AWS_IAM":
            scheme, _, key = (token or "").partition(" ")
            if scheme.lower() == "bearer" and self._is_admin_key(key):
                return 0, {"identity": {"userArn": "arn:aws:iam::123456789012:user/local-admin",
                                        "caller": "local-admin"}}
            return 403, {}
        if not token:
            return 401, {}
        cached = self._cached_decision(token)
        if cached is not None:
            return 0, cached
        if self.authorizer_ttl_s > 0:
            # Concurrent requests with one header ask the authorizer once: the others wait for
            # its cached decision (otherwise each would start an execution environment of its
            # own when the cache entry expires under load).
            with self._flight_lock(token):
                cached = self._cached_decision(token)
                if cached is not None:
                    return 0, cached
                return self._ask_authorizer(route, token)
        return self._ask_authorizer(route, token)

    def _flight_lock(self, token: str) -> threading.Lock:
        with self._decisions_lock:
            lock = self._flights.get(token)
            if lock is None:
                if len(self._flights) >= MAX_CACHED_DECISIONS:
                    self._flights.clear()  # locks held now stay valid for their holders
                lock = self._flights[token] = threading.Lock()
            return lock

    def _ask_authorizer(self, route: ApiRoute, token: str) -> tuple[int, dict[str, Any]]:
        assert self.authorizer is not None
        event = {"type": "TOKEN", "authorizationToken": token,
                 "methodArn": self._method_arn(route)}
        try:
            policy = self.pools[self.authorizer].invoke(event)
        except FunctionError:
            return 401, {}
        statements = policy.get("policyDocument", {}).get("Statement", [])
        if not statements or any(s.get("Effect") != "Allow" for s in statements):
            return 401, {}
        context = dict(policy.get("context") or {})
        context["principalId"] = policy.get("principalId")
        decision = {"authorizer": context, "usage_key": policy.get("usageIdentifierKey")}
        if self.authorizer_ttl_s > 0 and self._covers_every_route(statements):
            self._remember(token, decision)
        return 0, decision

    def _method_arn(self, route: ApiRoute) -> str:
        return (f"arn:aws:execute-api:us-east-1:123456789012:{self.api_id}/{self.stage}/"
                f"{route.method}{route.path}")

    def _covers_every_route(self, statements: list[dict[str, Any]]) -> bool:
        """Whether some Allow statement's Resource matches every authorized route's method ARN
        (IAM wildcards: `*` any run of characters, `?` one)."""
        patterns = []
        for statement in statements:
            resources = statement.get("Resource")
            for resource in resources if isinstance(resources, list) else [resources]:
                if isinstance(resource, str):
                    patterns.append(re.compile(
                        re.escape(resource).replace(r"\*", ".*").replace(r"\?", ".") + "$"))
        arns = [self._method_arn(r) for r in self.routes if r.auth == "default"]
        return any(all(p.match(arn) for arn in arns) for p in patterns)

    def _cached_decision(self, token: str) -> dict[str, Any] | None:
        with self._decisions_lock:
            entry = self._decisions.get(token)
            if entry is None:
                return None
            if entry[0] <= time.monotonic():
                del self._decisions[token]
                return None
            return entry[1]

    def _remember(self, token: str, decision: dict[str, Any]) -> None:
        with self._decisions_lock:
            if len(self._decisions) >= MAX_CACHED_DECISIONS:
                self._decisions.pop(next(iter(self._decisions)))  # the oldest
            self._decisions[token] = (time.monotonic() + self.authorizer_ttl_s, decision)

    def proxy_event(self, route: ApiRoute, params: dict[str, str], method: str, raw_path: str,
                    query: str, headers: dict[str, str], body: bytes,
                    extra_context: dict[str, Any]) -> dict[str, Any]:
        qs = parse_qs(query, keep_blank_values=True)
        ctype = headers.get("content-type", "")
        encoding = headers.get("content-encoding", "")
        is_text = not body or (any(ctype.startswith(t) for t in _TEXT_TYPES)
                               and encoding in ("", "identity") and _is_utf8(body))
        request_id = str(uuid.uuid4())
        context: dict[str, Any] = {
            "resourcePath": route.path, "httpMethod": method, "path": f"/{self.stage}{raw_path}",
            "stage": self.stage, "requestId": request_id, "apiId": self.api_id,
            "accountId": "123456789012", "protocol": "HTTP/1.1",
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": "127.0.0.1", "userAgent": headers.get("user-agent")},
        }
        if "identity" in extra_context:
            context["identity"].update(extra_context["identity"])
        if "authorizer" in extra_context:
            context["authorizer"] = extra_context["authorizer"]
        return {
            "resource": route.path, "path": raw_path, "httpMethod": method,
            "headers": headers, "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": {k: v[-1] for k, v in qs.items()} or None,
            "multiValueQueryStringParameters": qs or None,
            "pathParameters": params or None, "stageVariables": None,
            "requestContext": context,
            "body": (body.decode("utf-8") if is_text else base64.b64encode(body).decode())
            if body else None,
            "isBase64Encoded": bool(body) and not is_text,
        }

    def handle(self, method: str, target: str, headers: dict[str, str],
               body: bytes) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(target)
        path = parts.path
        json_headers = {"Content-Type": "application/json"}
        if path.startswith("/_local/"):
            return self._local(method, path, headers, body)
        found = self.match(method, path)
        if found is None:
            return 404, json_headers, _envelope("not_found", "No such route.")
        route, params = found
        if len(body) > MAX_BODY:
            return 413, json_headers, _envelope("payload_too_large", "The request body exceeds 10 MB.")
        status, extra = self.authorize(route, headers, method, target, body)
        if status == 401:
            return 401, json_headers, _envelope("unauthorized", "A valid API key is required.")
        if status == 403:
            code, message = extra.get("refused", ("forbidden", "Admin routes require admin credentials."))
            return 403, json_headers, _envelope(code, message)
        if self.throttle is not None and route.auth == "default":
            usage_key = extra.get("usage_key")
            if not usage_key:  # ApiKeyRequired without a usage identifier: API Gateway's 403
                return 403, json_headers, _envelope("forbidden", "No usage plan for this key.")
            wait = self.throttle.take(str(usage_key))
            if wait > 0:
                return 429, {**json_headers, "Retry-After": str(max(1, math.ceil(wait)))}, \
                    _envelope("rate_limited", "This tenant is over its request rate; retry "
                              "after Retry-After seconds.")
        if self.counts is not None:
            self.counts.gateway_request(f"{route.method} {route.path}")
        event = self.proxy_event(route, params, method, path, parts.query, headers, body, extra)
        try:
            result = self.pools[route.function].invoke(event, timeout_s=INTEGRATION_TIMEOUT_S)
        except FunctionTimeout as exc:
            log.warning("%s %s -> %s: %s", method, route.path, exc.function, exc.message)
            return 504, json_headers, _envelope(
                "gateway_timeout", "The function did not answer within its timeout "
                f"({min(INTEGRATION_TIMEOUT_S, self.pools[route.function].spec.timeout_s):g} s).")
        except PayloadTooLarge as exc:
            log.warning("%s: %s", exc.function, exc.message)
            if exc.error_type == "RequestEntityTooLargeException":
                return 413, json_headers, _envelope(
                    "payload_too_large", "The request exceeds the function's 6 MB payload limit.")
            return 502, json_headers, _envelope("bad_gateway", "The function's response exceeds 6 MB.")
        except FunctionError as exc:
            # What API Gateway answers when the integration fails; the reason goes to the log,
            # as Lambda's goes to CloudWatch.
            log.warning("%s failed: %s: %s", exc.function, exc.error_type, exc.message)
            return 502, json_headers, _envelope("bad_gateway", "The function failed.")
        if not isinstance(result, dict) or not isinstance(result.get("statusCode", 200), int):
            return 502, json_headers, _envelope("bad_gateway", "Malformed Lambda proxy response.")
        out_headers = {k: str(v) for k, v in (result.get("headers") or {}).items()}
        for k, values in (result.get("multiValueHeaders") or {}).items():
            out_headers[k] = ", ".join(str(v) for v in values)
        raw = result.get("body") or ""
        payload = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
        return int(result.get("statusCode", 200)), out_headers, payload

    def _local(self, method: str, path: str, headers: dict[str, str],
               body: bytes) -> tuple[int, dict[str, str], bytes]:
        json_headers = {"Content-Type": "application/json"}
        scheme, _, key = headers.get("authorization", "").partition(" ")
        if not (scheme.lower() == "bearer" and self._is_admin_key(key)):
            return 403, json_headers, _envelope("forbidden", "Local control routes need the admin key.")
        for prefix, fn in self.local_routes.items():
            if method == "POST" and path.startswith(prefix):
                status, doc = fn(path[len(prefix):], body)
                return status, json_headers, json.dumps(doc).encode()
        return 404, json_headers, _envelope("not_found", "No such local control route.")


class _Handler(BaseHTTPRequestHandler):
    gateway: Gateway
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not _LENGTH.match(declared):
            # Where the body ends is unknown, so the connection cannot carry another request:
            # answer in the envelope (API Gateway's 400) and close it, never drop it unanswered.
            self.close_connection = True
            self._reply(400, {"Content-Type": "application/json"},
                        _envelope("bad_request", "The Content-Length header is malformed."))
            return
        length = int(declared)
        if length > MAX_BODY:
            self.close_connection = True
            # Read what the client sends (up to a bound) so it sees the 413, not a reset.
            remaining = length if length <= 8 * MAX_BODY else 0
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
            self._reply(413, {"Content-Type": "application/json"},
                        _envelope("payload_too_large", "The request body exceeds 10 MB."))
            return
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, out_headers, payload = self.gateway.handle(self.command, self.path, headers, body)
        self._reply(status, out_headers, payload)

    def _reply(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            if k.lower() not in ("content-length", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if getattr(self, "command", None) != "HEAD":  # a HEAD answer: the headers, no body
            self.wfile.write(payload)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The standard library's own refusals (an unreadable request line, a URI or headers too
        # long) answer in the envelope too, never an HTML page; the connection is closed, as the
        # rest of what the client sent cannot be trusted to start a request.
        self.close_connection = True
        if getattr(self, "request_version", "HTTP/0.9") == "HTTP/0.9":
            # An unreadable request line leaves HTTP/0.9, which has no status line or headers.
            self.request_version = self.protocol_version
        name = _STDLIB_REFUSALS.get(code, ("bad_request", "The request could not be read."))
        self._reply(code, {"Content-Type": "application/json"}, _envelope(*name))

    def __getattr__(self, name: str) -> Any:
        # The standard library answers a method without a `do_<METHOD>` with a 501 HTML page.
        # API Gateway routes any method (HEAD, OPTIONS, TRACE, made-up ones): one the template
        # does not define on a path is refused in the envelope like an unknown route.
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # request lines would go to stderr for every call; the stack logs its own summary


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    # The standard library's backlog of 5 resets connections when ~30 clients connect at once.
    request_queue_size = 512


def serve(gateway: Gateway, host: str, port: int) -> tuple[GatewayServer, threading.Thread]:
    handler = type("BoundHandler", (_Handler,), {"gateway": gateway})
    server = GatewayServer((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, name="gateway", daemon=True)
    thread.start()
    return server, thread
