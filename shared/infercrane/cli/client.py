"""A small HTTP client for the service API (standard library only: the CLI starts fast)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (method, url, headers, body) -> the headers to send, signed (see cli/sigv4.py).
Signer = Callable[[str, str, dict[str, str], bytes | None], dict[str, str]]

# HTTP status -> CLI exit code (the conventions page): 2 bad input, 4 not found, 1 otherwise.
EXIT_FOR_STATUS = {400: 2, 413: 2, 422: 2, 409: 2, 404: 4}
# A 429 is retried after its Retry-After (at most 60 s each) this many times, then reported.
RATE_LIMIT_RETRIES = 8


def _retry_after(value: str | None) -> float | None:
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


class CliError(Exception):
    """A one-line error for the user, with the process exit code it implies."""

    def __init__(self, message: str, exit_code: int = 1, document: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.document = document


@dataclass
class ApiClient:
    endpoint: str
    api_key: str | None
    timeout_s: float = 60.0
    signer: Signer | None = None

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None, raw: bytes | None = None,
                content_type: str = "application/json", on_timeout: str | None = None) -> Any:
        """The answer's JSON; raises CliError. `on_timeout` is what to do next, said after the
        message of a 504 (API Gateway's 29 s)."""
        if not self.endpoint:
            raise CliError("No endpoint: pass --endpoint or set INFERCRANE_ENDPOINT "
                           "(for the local stack, see `infercrane local serve`).", 2)
        url = self.endpoint.rstrip("/") + path
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if self.signer is not None:
            headers = self.signer(method, url, headers, data)
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                    payload = resp.read()
                    status = resp.status
                break
            except urllib.error.HTTPError as exc:
                payload, status = exc.read(), exc.code
                # A 429 was refused before any work (the tenant's request or work rate): wait as
                # told and send it again, so a large import slows to the rate instead of failing.
                wait = _retry_after(exc.headers.get("Retry-After")) if status == 429 else None
                if wait is None or attempt == RATE_LIMIT_RETRIES:
                    break
                time.sleep(wait)
            except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                raise CliError(f"Cannot reach {self.endpoint}: {reason}.", 1) from exc
        try:
            doc = json.loads(payload) if payload else None
        except ValueError:
            doc = None
        if status >= 400:
            err = (doc or {}).get("error") if isinstance(doc, dict) else None
            if status == 401:
                raise CliError("Unauthorized: pass a valid --api-key or set INFERCRANE_API_KEY.", 1, doc)
            message = err.get("message") if isinstance(err, dict) else None
            if message is None and isinstance(doc, dict) and isinstance(doc.get("message"), str):
                message = doc["message"]  # API Gateway's own {"message": ...} refusals
            message = message or f"HTTP {status}"
            field = err.get("field") if isinstance(err, dict) else None
            suffix = f" (field: {field})" if field else ""
            if status == 504 and on_timeout:
                suffix += f" {on_timeout}"
            raise CliError(f"{message}{suffix}", EXIT_FOR_STATUS.get(status, 1), doc)
        return doc
