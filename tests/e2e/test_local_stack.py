from __future__ import annotations

import json
import re
import signal
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tests.e2e.conftest import start_served


def test_ready_line_names_endpoints_and_one_key_per_tenant(served):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", served.endpoint)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", served.aws_endpoint)
    assert set(served.tenants) == {"demo", "other"}
    assert all(k.startswith("ick_") for k in served.tenants.values())


def test_the_api_serves_64_concurrent_connections(served):
    key = served.tenants["demo"]

    def call(i: int) -> int:
        path = "/v1/openapi.json" if i % 2 else "/v1/prefetch-requests/missing"
        return requests.get(served.endpoint + path, headers={"Authorization": f"Bearer {key}"},
                            timeout=60).status_code

    with ThreadPoolExecutor(max_workers=64) as pool:
        statuses = list(pool.map(call, range(64)))
    assert len(statuses) == 64
    assert all(s in (200, 404) for s in statuses), statuses


def test_local_tick_fires_a_scheduled_function_on_demand(served):
    done = served.cli("local", "tick", "cache_sweep", "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["function"] == "CacheSweepFunction"
    refused = served.cli("local", "tick", "api")
    assert refused.returncode == 2 and "no schedule" in refused.stderr


def test_admin_key_is_needed_for_local_control_routes(served):
    r = requests.post(served.endpoint + "/_local/tick/cache_sweep",
                      headers={"Authorization": f"Bearer {served.tenants['demo']}"}, timeout=10)
    assert r.status_code == 403


def test_unreachable_endpoint_is_a_one_line_error(served):
    done = served.cli("admin", "dlq", "list", "--endpoint", "http://127.0.0.1:9")
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: Cannot reach http://127.0.0.1:9")
    assert len(done.stderr.strip().splitlines()) == 1


def test_stack_stops_cleanly_on_sigterm(tmp_path):
    stack = start_served(tmp_path)
    done = stack.cli("capacity", "--window", "1h", "--output", "json")
    assert done.returncode == 0, done.stderr  # the API's and authorizer's environments ran
    environments = descendants(stack.process.pid)
    assert environments
    stack.process.send_signal(signal.SIGTERM)
    assert stack.process.wait(timeout=20) == 0
    out = stack.process.stdout.read().decode()
    assert len(out.strip().splitlines()) == 1 and json.loads(out)["endpoint"] == stack.endpoint
    # It exits without the interpreter's final collection: every environment is gone all the same.
    assert not [pid for pid in environments if running(pid)], "processes left behind"


def test_bad_tenant_name_is_refused_before_starting(tmp_path):
    from tests.e2e.conftest import BIN

    done = subprocess.run([str(BIN), "local", "serve", "--tenant", "Bad_Name"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--tenant" in done.stderr


def test_an_undecodable_json_body_is_a_400_envelope_not_a_crash(served):
    r = requests.post(served.endpoint + "/v1/observations", data=b"\x1f\x8b\x08\x00\xff\xfe",
                      headers={"Authorization": f"Bearer {served.tenants['demo']}",
                               "Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["code"] in ("invalid_json", "bad_request", "invalid_encoding")


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_admin_rotates_a_tenants_hmac_keys_with_its_own_role(served):
    # Through the admin function, whose role moto enforces: a rotation moves AWSCURRENT to the
    # new keyring version (secretsmanager:UpdateSecretVersionStage), which its role must allow.
    name = f"rotate{uuid.uuid4().hex[:6]}"
    assert served.cli("admin", "tenant", "create", name, tenant=None).returncode == 0
    versions = []
    for _ in range(2):
        done = served.cli("admin", "hmac", "rotate", name, "--output", "json", tenant=None)
        assert done.returncode == 0, done.stderr
        versions.append(json.loads(done.stdout)["current_version"])
    assert versions == ["v2", "v3"]


def test_a_counting_stack_reports_the_requests_a_batch_caused_and_a_plain_one_refuses(
        served, tmp_path):
    admin = {"Authorization": f"Bearer {served.admin_key}"}
    assert requests.post(served.endpoint + "/_local/counts", headers=admin,
                         timeout=10).status_code == 404  # counting is off by default
    from tests.e2e.conftest import serving

    with serving(tmp_path, "--count-requests", "--no-schedules") as stack:
        admin = {"Authorization": f"Bearer {stack.admin_key}"}

        def counts() -> dict:
            r = requests.post(stack.endpoint + "/_local/counts", headers=admin, timeout=10)
            assert r.status_code == 200, r.text
            return r.json()

        before = counts()
        items = [{"deployment": "counted", "observation_id": f"c-{i}", "input_tokens": 10,
                  "output_tokens": 5, "latency_ms": 40.0, "arrival": "2026-12-03T10:00:00Z"}
                 for i in range(20)]
        r = requests.post(stack.endpoint + "/v1/observations", json={"items": items},
                          headers={"Authorization": f"Bearer {stack.tenants['demo']}"}, timeout=60)
        assert r.status_code == 200 and r.json()["accepted"] == 20, r.text
        after = counts()
    assert after["api_gateway"]["requests"] - before["api_gateway"]["requests"] == 1
    api = after["lambda"]["ApiFunction"]
    assert api["invocations"] - before["lambda"]["ApiFunction"]["invocations"] == 1
    assert api["cpu_s"] > before["lambda"]["ApiFunction"]["cpu_s"]
    assert api["memory_mb"] > 0
    # Stored somewhere: write units in DynamoDB, or objects PUT on S3 (whichever layout runs).
    assert (after["dynamodb"]["wru"] > before["dynamodb"]["wru"]
            or after["s3"]["requests"].get("PUT", 0) > before["s3"]["requests"].get("PUT", 0))
