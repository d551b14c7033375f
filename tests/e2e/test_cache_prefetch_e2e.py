"""The artifact-cache contract and prefetch flow through `infercrane local serve`, as a user
(CLI and HTTP), with message counts read back from the stack's moto."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from infercrane.adapters.aws_session import forget_shared_session
from infercrane.adapters.dynamo.base import DynamoConfig
from infercrane.adapters.dynamo.cache import DynamoCacheStore
from infercrane.clock import rfc3339
from infercrane.domain.prefetch import PrefetchService, key_hash
from infercrane.errors import DependencyUnavailable
from tests.e2e.conftest import Served, serving

CACHE_TABLE = "infercrane-local-CacheTable"


def new_digest() -> str:
    return "sha256:" + secrets.token_hex(32)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A stack of this module's own: `sent_messages` reads moto's whole state (data.json), which
    on the session's stack holds every observation the worker's other modules imported — each
    read took seconds there, and the 30-second waits that poll it timed out on a busy machine."""
    with serving(tmp_path_factory.mktemp("prefetch-stack")) as stack:
        yield stack


@pytest.fixture
def moto_env(served: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The test process talks to the stack's moto directly, as its operator; the process's shared
    # botocore session keeps the first credentials it found, so it starts afresh on both sides.
    for name, value in served.aws_credentials.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    forget_shared_session()
    yield
    forget_shared_session()


def api(served: Any, method: str, path: str, body: Any = None,
        tenant: str = "demo") -> requests.Response:
    return requests.request(method, served.endpoint + path, json=body, timeout=30,
                            headers={"Authorization": f"Bearer {served.tenants[tenant]}"})


def sent_messages(served: Any, request_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every message ever sent for a request, by kind, from moto's own record (it keeps
    consumed messages too), so counts do not depend on what the consumers did with them."""
    data = requests.get(f"{served.aws_endpoint}/moto-api/data.json", timeout=30).json()
    seen: dict[str, dict[str, Any]] = {}
    for m in (data.get("sqs") or {}).get("Message", []):
        try:
            body = json.loads(m.get("body") or "")
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("request_id") == request_id:
            seen[m["id"]] = body
    out: dict[str, list[dict[str, Any]]] = {"dispatch": [], "prefetch": [], "release": []}
    for body in seen.values():
        out[body.get("action", "dispatch")].append(body)
    return out


def stored_attempts(served: Any, tenant: str, model: str, adapter: str, location: str) -> int:
    ddb = served.aws("dynamodb")
    got = ddb.query(TableName=CACHE_TABLE, KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": {
                        "S": f"{tenant}#PREFETCH#{key_hash(tenant, model, adapter, location)}"}})
    return int(got["Count"])


def status_of(served: Any, request_id: str) -> dict[str, Any]:
    return api(served, "GET", f"/v1/prefetch-requests/{request_id}").json()


def wait_for(predicate: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_fifty_concurrent_identical_requests_make_one_request_and_one_message(
        served: Any, moto_env: None) -> None:
    model = new_digest()
    body = {"model": model, "adapter": "aws", "location": "us-east-1a", "source": "snap-0abc"}
    start = threading.Barrier(50)

    def post(_: int) -> tuple[int, str]:
        start.wait()
        r = api(served, "POST", "/v1/prefetch-requests", body)
        return r.status_code, r.json()["id"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(post, range(50)))
    codes = sorted(code for code, _ in results)
    assert codes == [200] * 49 + [202]
    ids = {rid for _, rid in results}
    assert len(ids) == 1
    [rid] = ids
    assert stored_attempts(served, "demo", model, "aws", "us-east-1a") == 1

    dispatched = wait_for(lambda: status_of(served, rid)["dispatch_count"])
    assert dispatched == 1
    messages = wait_for(lambda: (m := sent_messages(served, rid))["prefetch"] and m)
    assert len(messages["dispatch"]) == 1
    assert len(messages["prefetch"]) == 1
    assert messages["prefetch"][0] == {
        "schema": "infercrane.prefetch/v1", "action": "prefetch", "tenant": "demo",
        "request_id": rid, "model": model, "adapter": "aws", "location": "us-east-1a",
        "source": "snap-0abc", "attempt": 1}


class NeverSends:
    """Fault injection from the test side: the enqueue after persisting never happens."""

    def send(self, body: dict[str, Any]) -> str:
        raise DependencyUnavailable("The queue is unavailable.")


def test_killed_dispatch_is_recovered_by_the_sweeper_with_one_adapter_message(
        served: Any, moto_env: None) -> None:
    model = new_digest()
    store = DynamoCacheStore(CACHE_TABLE, DynamoConfig("us-east-1", served.aws_endpoint))
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    crashed = PrefetchService(store, NeverSends(), {}, lambda: an_hour_ago)
    req, created = crashed.request("demo", model, "gcp", "us-central1-a", "projects/p/snap")
    assert created
    assert status_of(served, req.id)["status"] == "accepted"

    tick = served.cli("local", "tick", "cache_sweep", "--output", "json")
    assert tick.returncode == 0, tick.stderr
    # Nothing was enqueued, so only a sweep (this tick, or the stack's own 5-minute schedule if
    # it happened to fire first) can get the request to its adapter.
    assert "requests_redispatched" in json.loads(tick.stdout)["result"]
    assert wait_for(lambda: status_of(served, req.id)["dispatch_count"]) == 1
    # Sweeping again finds nothing overdue for this request.
    served.cli("local", "tick", "cache_sweep")
    time.sleep(1.0)
    doc = served.cli_json("prefetch", "status", req.id)
    # The stack's real adapter takes it from here (dispatched -> in_progress -> ...); what the
    # sweeper owes is exactly one dispatch and one adapter execution.
    assert doc["status"] != "accepted"
    assert doc["dispatch_count"] == 1
    messages = sent_messages(served, req.id)
    assert len(messages["dispatch"]) == 1
    # The adapter may re-check a resource still preparing by re-sending the message to its own
    # queue with the next check number; the dispatcher's message is the only first check.
    first_checks = [m for m in messages["prefetch"] if m["attempt"] == req.attempt]
    assert len(first_checks) == 1


def test_prefetch_cli_round_trip_release_and_tenant_isolation(served: Any) -> None:
    model = new_digest()
    args = ("prefetch", "request", "--model", model, "--adapter", "kubernetes",
            "--location", "prod-eks/models", "--source", "models/llama-snap")
    first = served.cli_json(*args)
    assert first["status"] in ("accepted", "dispatched")
    # The repeats go straight over HTTP so they arrive while the first attempt is still open.
    # The stack's real Kubernetes adapter may still end it first (this cluster holds no such
    # VolumeSnapshot), and an ended request lets the next one start a new attempt: each answer
    # is checked against the contract for the state the request was in.
    body = {"model": model, "adapter": "kubernetes", "location": "prod-eks/models",
            "source": "models/llama-snap"}
    same = api(served, "POST", "/v1/prefetch-requests", body)
    conflict = api(served, "POST", "/v1/prefetch-requests", {**body, "source": "models/other-snap"})
    ended = status_of(served, first["id"])["status"] in ("completed", "failed")
    if same.status_code == 200:
        assert same.json()["id"] == first["id"]
    else:
        assert ended, same.text
        assert same.status_code == 202
        assert same.json()["id"] != first["id"]
    if conflict.status_code == 409:
        assert conflict.json()["error"]["field"] == "source"
    else:
        assert ended, conflict.text
        assert conflict.status_code == 202
    assert served.cli_json("prefetch", "status", first["id"])["model"] == model
    hidden = served.cli("prefetch", "status", first["id"], tenant="other")
    assert hidden.returncode == 4
    released = served.cli_json("prefetch", "release", first["id"])
    assert released["release_requested_at"] is not None
    assert api(served, "POST", f"/v1/prefetch-requests/{first['id']}/release",
               tenant="other").status_code == 404
    kinds = wait_for(lambda: (m := sent_messages(served, first["id"]))["release"] and m)
    assert len(kinds["release"]) == 1


def test_cache_observations_clamp_expire_and_stay_in_their_tenant(served: Any) -> None:
    model = new_digest()
    now = datetime.now(UTC)
    fresh = {"model": model, "adapter": "aws", "location": "us-east-1a", "state": "present",
             "evidence": {"snapshot_id": "snap-0abc", "fsr": "enabled"},
             "observed_at": rfc3339(now), "ttl_seconds": 25 * 3600}
    r = api(served, "POST", "/v1/cache-observations", fresh)
    assert r.status_code == 200, r.text
    doc = r.json()
    span = (datetime.fromisoformat(doc["expires_at"]) - datetime.fromisoformat(doc["observed_at"]))
    assert span == timedelta(hours=24)
    stale = {**fresh, "location": "us-east-1b", "ttl_seconds": 3600,
             "observed_at": rfc3339(now - timedelta(seconds=3601))}
    assert api(served, "POST", "/v1/cache-observations", stale).status_code == 200

    status = served.cli_json("cache", "status", "--model", model)
    assert status["model"] == model
    states = {o["location"]: o["state"] for o in status["observations"]}
    assert states == {"us-east-1a": "present", "us-east-1b": "unknown"}
    one = served.cli_json("cache", "status", "--model", model, "--adapter", "aws",
                          "--location", "us-east-1a")
    assert [o["evidence"]["snapshot_id"] for o in one["observations"]] == ["snap-0abc"]
    assert api(served, "GET", f"/v1/cache/{model}", tenant="other").json()[
        "observations"] == []
    table = served.cli("cache", "status", "--model", model)
    assert table.returncode == 0
    assert "present" in table.stdout


@pytest.mark.parametrize(("patch", "field"), [
    ({"adapter": "azure"}, "adapter"),
    ({"model": "sha256:1234"}, "model"),
    ({"location": "us-central1-a"}, "location"),
    ({"source": None}, "source"),
])
def test_bad_prefetch_requests_get_a_4xx_naming_the_field_and_store_nothing(
        served: Any, moto_env: None, patch: dict[str, Any], field: str) -> None:
    body: dict[str, Any] = {"model": new_digest(), "adapter": "aws", "location": "us-east-1a",
                            "source": "snap-1"}
    body.update(patch)
    body = {k: v for k, v in body.items() if v is not None}
    r = api(served, "POST", "/v1/prefetch-requests", body)
    assert 400 <= r.status_code < 500
    assert r.json()["error"]["field"] == field
    if isinstance(body.get("model"), str) and isinstance(body.get("location"), str):
        assert stored_attempts(served, "demo", body["model"], str(body["adapter"]),
                               body["location"]) == 0


def test_bad_cache_reads_and_reports_name_the_field(served: Any) -> None:
    assert api(served, "GET", "/v1/cache/sha256:nothex").json()["error"]["field"] == \
        "model_digest"
    future = {"model": new_digest(), "adapter": "gcp", "location": "us-central1-a",
              "state": "present", "evidence": {"disk": "d"},
              "observed_at": rfc3339(datetime.now(UTC) + timedelta(minutes=10))}
    r = api(served, "POST", "/v1/cache-observations", future)
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "observed_at"
    assert api(served, "GET", f"/v1/cache/{future['model']}").json()["observations"] == []


def test_model_digest_cli_prints_the_digest(served: Any, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "weights.bin").write_bytes(os.urandom(1024))
    doc = served.cli_json("model", "digest", str(tmp_path))
    assert doc["model"].startswith("sha256:")
    assert (doc["files"], doc["bytes"]) == (2, 1026)
    assert served.cli("model", "digest", str(tmp_path / "missing")).returncode == 4
