"""The CLI waits out a 429's Retry-After and sends the request again; a 429 without one is
reported at once."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infercrane.cli.client import ApiClient, CliError


def server(answers: list[tuple[int, dict[str, str]]]):
    seen: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            status, headers = answers.pop(0) if answers else (200, {})
            body = json.dumps({"accepted": 1} if status == 200 else {"error": {
                "code": "rate_limited", "message": "Over the rate.", "field": None}}).encode()
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", **headers}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, seen


def test_a_429_with_retry_after_is_sent_again_after_the_wait():
    httpd, seen = server([(429, {"Retry-After": "0"}), (429, {"Retry-After": "0"})])
    try:
        api = ApiClient(f"http://127.0.0.1:{httpd.server_address[1]}", "ick_x")
        assert api.request("POST", "/v1/observations", {"items": []}) == {"accepted": 1}
        assert seen == [b'{"items": []}'] * 3  # the same body each time
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_429_without_retry_after_is_reported():
    httpd, seen = server([(429, {})])
    try:
        api = ApiClient(f"http://127.0.0.1:{httpd.server_address[1]}", "ick_x")
        with pytest.raises(CliError) as refused:
            api.request("POST", "/v1/observations", {"items": []})
        assert refused.value.message == "Over the rate." and len(seen) == 1
    finally:
        httpd.shutdown()
        httpd.server_close()
