"""Throttling by work through the local stack: one tenant's large bodies drain its own bucket
(429 + Retry-After in the envelope) while another tenant is served."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request


def post(served, key: str, body: bytes) -> tuple[int, dict[str, str], dict]:
    request = urllib.request.Request(
        f"{served.endpoint}/v1/observations", data=body, method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"{}")


def test_a_tenant_sending_more_kib_than_its_burst_gets_429_with_retry_after(served):
    name = f"flood{secrets.token_hex(3)}"
    created = served.cli("admin", "tenant", "create", name, "--output", "json", tenant=None)
    assert created.returncode == 0, created.stderr
    flood = json.loads(created.stdout)["api_key"]
    # 1 MiB bodies, each one request: the template's work burst (TenantWorkBurst, 10240 KiB)
    # holds ten of them, the usage plan's request limit (200/s) never notices.
    body = json.dumps({"items": [], "pad": "x" * (1024 * 1024)}).encode()
    answers = []
    for _ in range(30):
        status, headers, doc = post(served, flood, body)
        answers.append(status)
        if status == 429:
            break
    assert answers[-1] == 429, answers
    assert len(answers) >= 10 and 429 not in answers[:-1]  # the burst first, then refused
    assert doc["error"]["code"] == "rate_limited"
    wait = int(headers["Retry-After"])
    assert wait >= 1
    victim = served.cli_json("capacity", "--window", "24h")  # another tenant: its own bucket
    assert victim["scope"] == "tenant-observed"
    time.sleep(wait)  # what Retry-After promised: the same body fits again
    assert post(served, flood, body)[0] != 429
