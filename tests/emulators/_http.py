"""A small threaded JSON HTTP server shared by the emulators."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Route = tuple[str, re.Pattern[str], Callable[..., tuple[int, Any]]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog (5) resets connections under a burst of clients.
    request_queue_size = 128


class JsonEmulator:
    """Subclasses add routes with `self.route(method, regex, fn)`; fn(match, query, body) ->
    (status, json)."""

    def __init__(self) -> None:
        self._routes: list[Route] = []
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self.requests: list[tuple[str, str]] = []
        # Injected provider failures: (method, path regex, status, reason), each used once.
        self.faults: list[tuple[str, str, int, str]] = []

    def fail_next(self, method: str, path_regex: str, status: int, reason: str) -> None:
        self.faults.append((method, path_regex, status, reason))

    def fault_body(self, status: int, reason: str) -> Any:
        return {"error": reason}

    def route(self, method: str, pattern: str, fn: Callable[..., tuple[int, Any]]) -> None:
        self._routes.append((method, re.compile(f"^{pattern}$"), fn))

    def dispatch(self, method: str, raw_path: str, body: bytes) -> tuple[int, Any]:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        doc = json.loads(body) if body else None
        with self._lock:
            self.requests.append((method, parts.path))
            for i, (fm, fp, status, reason) in enumerate(self.faults):
                if fm == method and re.search(fp, parts.path):
                    del self.faults[i]
                    return status, self.fault_body(status, reason)
            for m, pattern, fn in self._routes:
                match = pattern.match(parts.path)
                if m == method and match:
                    return fn(match, query, doc)
        return 404, self.not_routed(method, parts.path)

    def not_routed(self, method: str, path: str) -> Any:
        return {"error": "no such route in the emulator"}

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    status, doc = emulator.dispatch(self.command, self.path, body)
                except ValueError:
                    status, doc = 400, {"error": "bad request body"}
                out = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server((host, port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name=type(self).__name__).start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
