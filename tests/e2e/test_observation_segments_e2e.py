"""Observations in segments as a user meets them, through `infercrane local serve`: an
observation answered 2xx is in a trace built right after, deletion through the API removes what
it names, and `infercrane admin migrate-observations` moves items of the one-item layout into
segments (each function's role enforced, so a missing grant fails here)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from infercrane.adapters.dynamo.observation_items import attributes
from infercrane.domain.observation import StoredObservation
from tests.e2e.test_capture_cli import partition


def api(served: Any, method: str, path: str, body: Any = None) -> requests.Response:
    return requests.request(method, served.endpoint + path, json=body, timeout=60,
                            headers={"Authorization": f"Bearer {served.tenants['demo']}"})


def items(deployment: str, n: int, start: datetime) -> list[dict[str, Any]]:
    return [{"observation_id": f"{deployment}-{i}", "deployment": deployment,
             "arrival": (start + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
             "input_tokens": 100 + i, "output_tokens": 10 + i, "latency_ms": 50.0 + i}
            for i in range(n)]


def test_an_observation_answered_2xx_is_in_a_trace_built_right_after(served):
    start = datetime.now(UTC) - timedelta(minutes=20)
    for n in range(1, 4):  # each batch, then at once a trace holding it
        reply = api(served, "POST", "/v1/observations",
                    {"items": items("seg-fresh", n, start)[n - 1:]})
        assert reply.status_code == 200 and reply.json()["stored"] == 1, reply.text
        header = served.cli_json("replay", "seg-fresh", "--window", "1h")
        assert header["sample_count"] == n


def test_deleting_observations_before_a_time_removes_them_from_segments(served):
    start = datetime.now(UTC) - timedelta(minutes=40)
    reply = api(served, "POST", "/v1/observations", {"items": items("seg-delete", 20, start)})
    assert reply.json()["stored"] == 20, reply.text
    cut = (start + timedelta(seconds=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
    gone = api(served, "DELETE", f"/v1/deployments/seg-delete/observations?before={cut}")
    assert gone.status_code == 200, gone.text
    kept = partition(served, "demo", "seg-delete")
    assert [o.observation_id for o in kept] == [f"seg-delete-{i}" for i in range(8, 20)]
    assert "denied:" not in served.log()


def test_admin_migrate_observations_moves_legacy_items_into_segments(served):
    # Items as the one-item layout wrote them (its own mapping), in the stack's table.
    ddb = served.aws("dynamodb")
    table = next(t for t in ddb.list_tables()["TableNames"] if "ObservationsTable" in t)
    base = int((datetime.now(UTC) - timedelta(hours=2)).timestamp() * 1000)
    legacy = [StoredObservation(
        tenant="demo", deployment="seg-legacy", observation_id=f"old-{i:04d}",
        arrival_ms=base + i * 7_000, input_tokens=10 + i, output_tokens=3, latency_ms=20.5,
        outcome="ok", streaming=False, sampling_rate=1.0, source="captured",
        ingested_at_ms=base + 60_000, fingerprint=f"{i:064x}") for i in range(600)]
    for o in legacy:
        ddb.put_item(TableName=table, Item=attributes(o, 30 * 86_400))
    assert partition(served, "demo", "seg-legacy") == []  # reads see segments only
    done = served.cli("admin", "migrate-observations", "demo", "--output", "json", tenant=None)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    mine = next(d for d in doc["deployments"] if d["deployment"] == "seg-legacy")
    assert (mine["copied"], mine["stored"], mine["already_present"]) == (600, 600, 0)
    assert "seg-legacy: 600 rows copied" in done.stderr
    assert partition(served, "demo", "seg-legacy") == legacy
    again = served.cli_json("admin", "migrate-observations", "demo", "--deployment",
                            "seg-legacy", tenant=None)
    assert again["deployments"] == [{"deployment": "seg-legacy", "copied": 600, "stored": 0,
                                     "already_present": 600, "segments": mine["segments"]}]
    assert "denied:" not in served.log()
