"""Adapters for a provider adapter that runs outside AWS (the Google Cloud Function): it reports
through the public API with one tenant's API key instead of writing the tables.

- `ApiCacheReporter` -> `POST /v1/cache-observations` (the tenant comes from the key).
- `ApiPrefetchRequests` -> `GET /v1/prefetch-requests/{id}` for status and recorded resources,
  `POST .../{id}/status` for transitions (409 -> `Conflict`, as the table write would raise) and
  `PUT .../{id}/resources/{key}` for set-if-absent resources (the stored value comes back). So a
  request handled by the Cloud Function moves through the same states, heartbeats and ends, as
  one handled in AWS.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from typing import Any

from infercrane.clock import rfc3339
from infercrane.errors import Conflict, DependencyUnavailable, InvalidInput, NotFound


class _Api:
    def __init__(self, endpoint: str, api_key: str, tenant: str, timeout_s: float = 10.0):
        if not endpoint.startswith(("https://", "http://127.0.0.1", "http://localhost")):
            raise InvalidInput("The API endpoint must use https.", field="endpoint")
        self._endpoint = endpoint.rstrip("/")
        self._key = api_key
        self.tenant = tenant
        self._timeout = timeout_s

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(  # noqa: S310 - endpoint scheme checked above
            f"{self._endpoint}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self._key}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:  # noqa: S310
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise DependencyUnavailable("The InferCrane API is unavailable.",
                                            field="endpoint") from exc
            return exc.code, None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise DependencyUnavailable("The InferCrane API is unavailable.",
                                        field="endpoint") from exc

    def for_tenant(self, tenant: str) -> bool:
        return tenant == self.tenant


class ApiCacheReporter(_Api):
    def report(self, tenant: str, model: str, adapter: str, location: str, state: str,
               evidence: dict[str, str], observed_at: datetime,
               ttl_seconds: int | None = None) -> Any:
        if not self.for_tenant(tenant):
            raise InvalidInput("This adapter reports for another tenant.", field="tenant")
        body: dict[str, Any] = {"model": model, "adapter": adapter, "location": location,
                                "state": state, "evidence": dict(evidence),
                                "observed_at": rfc3339(observed_at)}
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        status, doc = self.call("POST", "/v1/cache-observations", body)
        if status != 200:
            raise InvalidInput("The API refused the cache observation.", field="observation")
        return doc


class ApiPrefetchRequests(_Api):
    def get(self, tenant: str, request_id: str) -> Any:
        if not self.for_tenant(tenant):
            return None  # another tenant's message: not ours to act on
        status, doc = self.call("GET", f"/v1/prefetch-requests/{urllib.parse.quote(request_id)}")
        return doc if status == 200 else None

    def _refused(self, status: int, what: str) -> Exception:
        if status == 409:
            return Conflict(f"The API refused the {what}: the request moved on.", field="status")
        if status == 404:
            return NotFound("No such prefetch request.", field="id")
        return InvalidInput(f"The API refused the {what}.", field="status")

    def transition(self, tenant: str, request_id: str, to_status: str, *,
                   reason: str | None = None) -> Any:
        if not self.for_tenant(tenant):
            raise InvalidInput("This adapter reports for another tenant.", field="tenant")
        body: dict[str, Any] = {"status": to_status}
        if reason is not None:
            body["reason"] = reason[:512]
        status, doc = self.call("POST", f"/v1/prefetch-requests/{urllib.parse.quote(request_id)}"
                                        "/status", body)
        if status != 200:
            raise self._refused(status, "status change")
        return doc

    def record_resource(self, tenant: str, request_id: str, key: str, value: str) -> str:
        if not self.for_tenant(tenant):
            raise InvalidInput("This adapter reports for another tenant.", field="tenant")
        path = (f"/v1/prefetch-requests/{urllib.parse.quote(request_id)}/resources/"
                f"{urllib.parse.quote(key, safe='')}")
        status, doc = self.call("PUT", path, {"value": value})
        if status != 200 or not isinstance(doc, dict) or not isinstance(doc.get("value"), str):
            raise self._refused(status, "resource record")
        return str(doc["value"])
