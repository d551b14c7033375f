"""Issue 26's refusals as a user meets them, through `infercrane local serve`: a file time no
clock holds, bodies of another media type, repeated keys, body-like keys in an adapter's report,
undefined methods and a malformed Content-Length. Each is a 4xx in the envelope (or exit 2), never
a 5xx, a traceback or a dropped connection."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from tests.e2e.test_capture_cli import partition

CANARY = "CANARY-e2e-refusal"


def test_a_file_time_no_clock_holds_is_exit_2_not_a_traceback(served: Any, tmp_path: Path):
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 5},
            {"timestamp": 1e300, "input_length": 10, "output_length": 5}]
    sample = tmp_path / "far.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = served.cli("capture", "import", str(sample), "--deployment", "far-future",
                      "--format", "mooncake-jsonl", "--start", "2026-11-29T00:00:00Z")
    assert done.returncode == 2, done.stderr
    assert "last_arrival" in done.stderr and "Traceback" not in done.stderr
    assert partition(served, "demo", "far-future") == []


def _post(served: Any, path: str, data: bytes, content_type: str) -> requests.Response:
    return requests.post(served.endpoint + path, data=data, timeout=60, headers={
        "Authorization": f"Bearer {served.tenants['demo']}", "Content-Type": content_type})


@pytest.mark.parametrize(("path", "data", "content_type", "status", "code"), [
    ("/v1/observations", b'{"items": []}', "text/plain", 415, "unsupported_media_type"),
    ("/v1/lifecycle-attempts", b'{"items": []}', "application/x-protobuf", 415,
     "unsupported_media_type"),
    ("/v1/traces", b'{"deployment": "d", "window": "1h", "window": "2h"}', "application/json",
     400, "duplicate_key"),
    ("/v1/observations", b'{"items": [{"latency_ms": 1e400}]}', "application/json", 400,
     "non_finite_number"),
    ("/v1/cache-observations", json.dumps({
        "model": "sha256:" + "0" * 64, "adapter": "aws", "location": "us-east-1a",
        "state": "present", "observed_at": "2026-11-29T00:00:00Z",
        "evidence": {"prompt": CANARY}}).encode(), "application/json", 422, "body_field_refused"),
    ("/v1/observations", json.dumps({"items": [], "messages": [CANARY]}).encode(),
     "application/json", 422, "body_field_refused"),
])
def test_hostile_bodies_are_refused_in_the_envelope(served: Any, path, data, content_type,
                                                    status, code):
    response = _post(served, path, data, content_type)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert CANARY not in response.text


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "BREW"])
def test_methods_no_route_defines_are_a_4xx_from_the_stack(served: Any, method):
    response = requests.request(method, served.endpoint + "/v1/traces", timeout=60)
    assert response.status_code == 404
    if method != "HEAD":
        assert response.json()["error"]["code"] == "not_found"


def test_a_malformed_content_length_is_a_400_from_the_stack(served: Any):
    url = urlsplit(served.endpoint)
    with socket.create_connection((url.hostname, url.port), timeout=30) as conn:
        conn.sendall(b"POST /v1/observations HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b'"bad_request"' in answer
