"""A synchronous trace build answered 504 (API Gateway's 29 s) tells the user what to do next."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from infercrane.cli.client import CliError
from infercrane.cli.main import cli


class GatewayTimeout(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"code": "gateway_timeout", "field": None,
                                     "message": "The function did not answer within its timeout "
                                                "(29 s)."}}).encode()
        self.send_response(504)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), GatewayTimeout)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("args", [
    ["replay", "chat", "--window", "1h", "--max-requests", "5000"],
    ["report", "--deployment", "chat", "--window", "1h", "--out", "r.html"]])
def test_a_504_from_a_build_says_to_retry_or_build_asynchronously(endpoint, args, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["--endpoint", endpoint, "--api-key", "ick_x", *args])
    assert isinstance(done.exception, CliError) and done.exception.exit_code == 1
    flat = " ".join(done.exception.message.split())
    assert "29 s" in flat and "retry" in flat
    assert "--max-requests above the service's synchronous limit" in flat
    assert "asynchronously" in flat
