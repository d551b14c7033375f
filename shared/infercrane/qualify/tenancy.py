"""Tenancy: every tenant route (from template.yaml) x {no key, unknown key, revoked key, another
tenant's key}. The first three answer 401 and leave every stored byte as it was; another tenant's
key gets a 404 for the owner's resources (or an answer without them) and changes none of them."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercrane.qualify.common import wait_for
from infercrane.qualify.core import PromiseResult
from infercrane.qualify.target import Reply, Target

PROMISE = "tenancy"
OWNER, INTRUDER = "demo", "other"
DEPLOYMENT = "qualify-tenancy"
MODEL = "sha256:" + "7" * 64
UNKNOWN_KEY = "ick_0123456789ab_" + "Q" * 43
# Present in every resource the owner creates; must never appear in another tenant's answers.
OWNER_MARK = "snap-0qualowner"
CREDENTIALS = ("no key", "unknown key", "revoked key", "other tenant's key")
# Placeholders for path parameters when the owner's real resource could not be created.
PLACEHOLDER = {"digest": "sha256:" + "0" * 64, "model_digest": MODEL, "id": "pf_" + "0" * 32 + "_1",
               "deployment": DEPLOYMENT, "revision": "qualify-rev"}


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # template form, /v1/traces/{digest}


def tenant_routes(template: Path | None = None) -> list[Route]:
    from infercrane.local.stack import find_template
    from infercrane.local.template import load

    tpl = load(template or find_template())
    return sorted({Route(r.method, r.path) for r in tpl.routes if r.auth == "default"},
                  key=lambda r: (r.path, r.method))


def admin_routes(template: Path | None = None) -> list[Route]:
    from infercrane.local.stack import find_template
    from infercrane.local.template import load

    tpl = load(template or find_template())
    return sorted({Route(r.method, r.path) for r in tpl.routes if r.auth == "AWS_IAM"},
                  key=lambda r: (r.path, r.method))


def concrete(path: str, values: Mapping[str, str]) -> str:
    return re.sub(r"\{([A-Za-z_]+)\}", lambda m: values.get(m.group(1), "x"), path)


def write_body(route: Route) -> Any:
    """A body that would change something if authorization let it through."""
    obs = {"deployment": DEPLOYMENT, "arrival": "2025-11-24T16:00:00.000Z", "input_tokens": 1,
           "output_tokens": 1, "latency_ms": 1.0, "observation_id": "qual-intruder-1"}
    bodies: dict[str, Any] = {
        "/v1/observations": {"items": [obs]},
        "/v1/traces": {"deployment": DEPLOYMENT, "window": "24h", "max_requests": 10},
        "/v1/lifecycle-attempts": {"items": [{
            "attempt_id": "qual-intruder-1", "deployment": DEPLOYMENT, "operation": "create",
            "adapter": "aws", "runtime": "vllm", "compute_mode": "on-demand", "region": "us-east-1",
            "gpu": "H100", "gpu_count": 1, "started_at": "2025-11-24T16:00:00.000Z",
            "finished_at": "2025-11-24T16:05:00.000Z", "outcome": "succeeded"}]},
        "/v1/cache-observations": {"model": MODEL, "adapter": "aws", "location": "us-east-1a",
                                   "state": "present", "evidence": {"snapshot_id": "snap-0intruder"},
                                   "observed_at": "2025-11-24T16:00:00.000Z"},
        "/v1/prefetch-requests": {"model": MODEL, "adapter": "aws", "location": "us-east-1a",
                                  "source": "snap-0intruder"},
        "/v1/deployments/{deployment}/revisions/{revision}": {"url": "http://127.0.0.1:9/v1"},
        # The Cloud Function adapter's reports: valid bodies, so only tenancy can refuse them.
        "/v1/prefetch-requests/{id}/status": {"status": "in_progress"},
        "/v1/prefetch-requests/{id}/resources/{key}": {"value": "vol-0intruder"},
    }
    if route.method in ("GET", "DELETE"):
        return None
    return bodies.get(route.path, {"items": []})


# -- storage fingerprints (the test side) --------------------------------------------------------
def _rows(target: Target) -> list[tuple[str, str]]:
    ddb, s3 = target.aws("dynamodb"), target.aws("s3")
    rows: list[tuple[str, str]] = []
    for table in ddb.list_tables()["TableNames"]:
        for page in ddb.get_paginator("scan").paginate(TableName=table):
            rows += [(table, json.dumps(i, sort_keys=True)) for i in page.get("Items", [])]
    for bucket in s3.list_buckets().get("Buckets", []):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
            rows += [(bucket["Name"], f"{o['Key']}:{o.get('ETag')}") for o in page.get("Contents", [])]
    return sorted(rows)


def fingerprint(rows: Sequence[tuple[str, str]], tenant: str | None = None) -> str:
    """A hash of every stored item and object; with `tenant`, only those keyed by that tenant."""
    if tenant is not None:
        mark = re.compile(rf'"(pk|id|sk)": \{{"S": "(TENANT#)?{re.escape(tenant)}[#/|]')
        rows = [r for r in rows if mark.search(r[1]) or f"/{tenant}/" in r[1]]
    return hashlib.sha256("\n".join(f"{a}\t{b}" for a, b in rows).encode()).hexdigest()


# -- fixtures the owner creates through the API --------------------------------------------------
def owner_fixtures(target: Target) -> tuple[dict[str, str], list[str]]:
    """Real resources of the owner, one per path parameter; which ones are real."""
    values = dict(PLACEHOLDER)
    real: list[str] = ["deployment"]
    obs = write_body(Route("POST", "/v1/observations"))
    obs["items"][0]["observation_id"] = "qual-owner-1"
    target.request("POST", "/v1/observations", tenant=OWNER, body=obs)
    r = target.request("POST", "/v1/traces", tenant=OWNER, body={
        "deployment": DEPLOYMENT, "window": "1h", "until": "2025-11-24T16:30:00.000Z",
        "max_requests": 10})
    if r.status in (200, 201) and isinstance(r.doc, dict) and r.doc.get("digest"):
        values["digest"] = r.doc["digest"]
        real.append("digest")
    r = target.request("POST", "/v1/prefetch-requests", tenant=OWNER,
                       body={**write_body(Route("POST", "/v1/prefetch-requests")),
                             "source": OWNER_MARK})
    if r.status in (200, 202) and isinstance(r.doc, dict) and r.doc.get("id"):
        values["id"] = r.doc["id"]
        real.append("id")
    r = target.request("POST", "/v1/cache-observations", tenant=OWNER,
                       body={**write_body(Route("POST", "/v1/cache-observations")),
                             "evidence": {"snapshot_id": OWNER_MARK}, "observed_at": _now()})
    if r.status in (200, 201, 202):
        real.append("model_digest")
    r = target.request("PUT", concrete("/v1/deployments/{deployment}/revisions/{revision}", values),
                       tenant=OWNER, body={"url": "http://127.0.0.1:9/v1"})
    if r.status in (200, 201):
        real.append("revision")
    return values, real


def _now() -> str:
    from infercrane.clock import rfc3339, utcnow

    return rfc3339(utcnow())


def revoked_key(target: Target, tenant: str = OWNER) -> str | None:
    r = target.admin("POST", f"/v1/admin/tenants/{tenant}/api-keys")
    doc = r.doc if isinstance(r.doc, dict) else {}
    if not doc.get("api_key") or not doc.get("key_id"):
        return None
    target.admin("DELETE", f"/v1/admin/tenants/{tenant}/api-keys/{doc['key_id']}")
    return str(doc["api_key"])


# -- the matrix --------------------------------------------------------------------------------
Send = Callable[[str, str, str | None, Any], Reply]


def check_route(route: Route, values: Mapping[str, str], keys: Mapping[str, str | None],
                send: Send, state: Callable[[], tuple[str, str]], result: PromiseResult,
                real: Sequence[str] = (), settle: Callable[[], object] = lambda: None,
                before: tuple[str, str] | None = None) -> tuple[str, str]:
    """Four credentials against one route. `state()` fingerprints (all storage, the owner's
    items); `send(method, path, key, body)` is the HTTP call; `settle` waits for background work
    a write by the other tenant may start. Returns the state after the route (the next one's
    `before`: nothing else runs in between, schedules are off)."""
    path = concrete(route.path, values)
    body = write_body(route)
    label = f"{route.method} {route.path}"
    whole_before, _ = before or state()
    for cred in CREDENTIALS[:3]:
        key = keys.get(cred)
        reply = send(route.method, path, key, body)
        code = (reply.doc or {}).get("error", {}).get("code") if isinstance(reply.doc, dict) else None
        result.check(f"{label} x {cred} → 401", reply.status == 401 and code == "unauthorized",
                     f"HTTP {reply.status}")
    whole_after, owned_before = state()
    result.check(f"{label} x refused credentials → nothing stored or changed",
                 whole_after == whole_before)
    reply = send(route.method, path, keys.get(CREDENTIALS[3]), body)
    params = re.findall(r"\{([A-Za-z_]+)\}", route.path)
    owned = [p for p in params if p not in ("deployment", "revision")]
    leaked = OWNER_MARK in reply.text or any(values[p] in reply.text for p in owned
                                             if p in values and p != "model_digest")
    if route.method == "GET" and owned == ["model_digest"]:
        # Cache states of a model digest: another tenant sees none of the owner's observations
        # (its own, if it reported some, are its business).
        ok = reply.status in (200, 404) and not leaked
    elif owned or (route.method == "GET" and "revision" in params):
        ok = reply.status == 404 and not leaked
    else:
        # Collections: whatever the answer, the owner's data is neither shown nor changed.
        ok = reply.status < 500 and OWNER_MARK not in reply.text and not any(
            values[p] in reply.text for p in ("digest", "id") if p in real)
    note = "" if all(p in real for p in owned) else " (placeholder id)"
    result.check(f"{label} x {CREDENTIALS[3]} → not found / not shown{note}", ok,
                 f"HTTP {reply.status}")
    if route.method != "GET":
        settle()
    final = state()
    result.check(f"{label} x {CREDENTIALS[3]} → owner's data unchanged", final[1] == owned_before)
    return final


def run(target: Target, send: Send | None = None) -> PromiseResult:
    result = PromiseResult(PROMISE)
    target.settle()
    values, real = owner_fixtures(target)
    target.settle()
    if "id" in real:  # the adapter works on it in the background until it ends
        wait_for(lambda: target.request("GET", f"/v1/prefetch-requests/{values['id']}",
                                        tenant=OWNER).doc or {},
                 lambda d: d.get("status") in ("completed", "failed"), timeout_s=60)
        target.settle()
    revoked = revoked_key(target)
    result.check("a revoked key could be made for the matrix", revoked is not None)
    keys = {"no key": None, "unknown key": UNKNOWN_KEY, "revoked key": revoked or UNKNOWN_KEY,
            "other tenant's key": target.tenants[INTRUDER]}

    def _send(method: str, path: str, key: str | None, body: Any) -> Reply:
        return target.request(method, path, key=key, body=body)

    def state() -> tuple[str, str]:
        rows = _rows(target)
        return fingerprint(rows), fingerprint(rows, OWNER)

    routes = tenant_routes()
    current: tuple[str, str] | None = None
    for route in routes:
        current = check_route(route, values, keys, send or _send, state, result, real,
                              target.settle, current)
    admins = admin_routes()
    for route in admins:
        reply = (send or _send)(route.method, concrete(route.path, {"tenant": OWNER, "key_id": "x",
                                                                   "queue": "capture"}),
                                target.tenants[OWNER], {"name": "intruder"})
        result.check(f"{route.method} {route.path} x tenant key → 403", reply.status == 403,
                     f"HTTP {reply.status}")
    result.tried = (f"{len(routes)} tenant routes x {len(CREDENTIALS)} credentials "
                    f"(owner fixtures: {', '.join(sorted(real))}) + {len(admins)} admin routes x "
                    "tenant key; storage fingerprinted before/after")
    result.facts = {"routes": [f"{r.method} {r.path}" for r in routes],
                    "real_fixtures": sorted(real)}
    return result
