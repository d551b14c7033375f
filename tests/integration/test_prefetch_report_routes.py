"""The adapter-side prefetch routes an adapter outside AWS reports through (the GCP Cloud
Function's `ApiPrefetchRequests`): status transitions with the contract's rules and
set-if-absent resources, scoped to the key's tenant. Through the deployed api handler."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.test_trace_routes import call

DIGEST = "sha256:" + "ef" * 32


def new_request(aws: Any, tenant: str = "acme") -> str:
    req, _ = aws.container.prefetch.request(tenant, DIGEST, "gcp", "us-central1-a",
                                            "projects/p/global/snapshots/s")
    return req.id


def status(rid: str, body: dict[str, Any], tenant: str = "acme") -> tuple[int, Any]:
    code, resp = call("POST", f"/v1/prefetch-requests/{rid}/status", body=body, tenant=tenant)
    return code, json.loads(resp["body"])


def resource(rid: str, key: str, value: str, tenant: str = "acme") -> tuple[int, Any]:
    code, resp = call("PUT", f"/v1/prefetch-requests/{rid}/resources/{key}",
                      body={"value": value}, tenant=tenant)
    return code, json.loads(resp["body"])


def test_an_outside_adapter_moves_a_request_to_completed_and_records_its_disk(aws):
    rid = new_request(aws)
    assert status(rid, {"status": "in_progress"})[1]["status"] == "in_progress"
    assert resource(rid, "resource_id", "disk-a") == (200, {"id": rid, "key": "resource_id",
                                                           "value": "disk-a"})
    # A racing delivery's disk loses: the first recorded value comes back.
    assert resource(rid, "resource_id", "disk-b")[1]["value"] == "disk-a"
    code, doc = status(rid, {"status": "completed"})
    assert code == 200 and doc["status"] == "completed" and doc["resources"]["resource_id"] == "disk-a"


def test_a_move_the_contract_forbids_is_a_409_and_bad_bodies_are_4xx(aws):
    rid = new_request(aws)
    status(rid, {"status": "failed", "reason": "Snapshot Not Encrypted"})
    code, doc = status(rid, {"status": "in_progress"})
    assert code == 409 and doc["error"]["code"] == "conflict"
    assert status(rid, {"status": "sleeping"})[0] == 422
    assert status(rid, {"status": "failed", "body": "x"})[0] == 422
    assert resource(rid, "Bad Key", "v")[0] == 422
    assert aws.container.prefetch.get("acme", rid).failure_reason == "snapshot_not_encrypted"


def test_another_tenants_request_is_not_found(aws):
    rid = new_request(aws, "acme")
    assert status(rid, {"status": "in_progress"}, tenant="globex")[0] == 404
    assert resource(rid, "resource_id", "x", tenant="globex")[0] == 404
    assert aws.container.prefetch.get("acme", rid).status == "accepted"
