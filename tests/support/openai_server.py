"""A small OpenAI-compatible streaming server for execution tests (127.0.0.1, a free port).

It answers `POST /v1/chat/completions` and `POST /v1/completions`, streamed (SSE) or not, and
records for every request only its *shape*: arrival time, prompt token count, the requested output
length, whether it streamed and whether it carried an Authorization header. Prompt bodies are
counted, never kept. Each generated token is the text " hello", one cl100k token, so a client
counting output tokens with cl100k sees exactly the number the server produced.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_TEXT = " hello"


@dataclass(frozen=True)
class Arrival:
    at_s: float  # time.monotonic() when the request line arrived
    path: str
    model: str
    prompt_tokens: int
    max_tokens: int | None
    streaming: bool
    authorized: bool  # an Authorization header was present
    authorization_ok: bool  # it equalled the expected bearer (when one is expected)


@dataclass
class ServerOptions:
    ttft_s: float = 0.002
    inter_token_s: float = 0.0005
    default_output_tokens: int = 16
    fail_status: int | None = None  # answer every completion with this HTTP status
    expected_bearer: str | None = None


@dataclass
class OpenAIServer:
    count_tokens: Callable[[str], int]
    options: ServerOptions = field(default_factory=ServerOptions)
    arrivals: list[Arrival] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self.peak_in_flight = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [
                        {"id": "test-llm", "object": "model", "owned_by": "tests"}]})
                elif self.path.rstrip("/") == "/health":
                    self._json(200, {"status": "ok"})
                else:
                    self._json(404, {"error": {"message": "no such route"}})

            def do_POST(self) -> None:
                server._serve_completion(self)

            def _json(self, status: int, doc: Any) -> None:
                payload = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the completion endpoint -----------------------------------------------------------------
    def _prompt_text(self, path: str, body: dict[str, Any]) -> str:
        if path.endswith("/chat/completions"):
            parts: list[str] = []
            for message in body.get("messages") or []:
                content = message.get("content")
                if isinstance(content, str):
                    parts.append(content)
                elif isinstance(content, list):
                    parts.extend(c.get("text", "") for c in content if isinstance(c, dict))
            return "".join(parts)
        prompt = body.get("prompt", "")
        return "".join(prompt) if isinstance(prompt, list) else str(prompt)

    def _serve_completion(self, handler: BaseHTTPRequestHandler) -> None:
        at = time.monotonic()
        path = handler.path.split("?", 1)[0].rstrip("/")
        length = int(handler.headers.get("Content-Length") or 0)
        try:
            body = json.loads(handler.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        if path not in ("/v1/chat/completions", "/v1/completions") or not isinstance(body, dict):
            handler._json(404, {"error": {"message": "no such route"}})  # type: ignore[attr-defined]
            return
        auth = handler.headers.get("Authorization")
        expected = self.options.expected_bearer
        requested = body.get("max_completion_tokens", body.get("max_tokens"))
        arrival = Arrival(
            at_s=at, path=path, model=str(body.get("model", "")),
            prompt_tokens=self.count_tokens(self._prompt_text(path, body)),
            max_tokens=int(requested) if isinstance(requested, int) else None,
            streaming=bool(body.get("stream")), authorized=auth is not None,
            authorization_ok=expected is None or auth == f"Bearer {expected}")
        with self._lock:
            self.arrivals.append(arrival)
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            if self.options.fail_status is not None:
                handler._json(self.options.fail_status,  # type: ignore[attr-defined]
                              {"error": {"message": "failing on purpose", "type": "test"}})
                return
            n = arrival.max_tokens or self.options.default_output_tokens
            if arrival.streaming:
                self._stream(handler, path, arrival, n)
            else:
                time.sleep(self.options.ttft_s + self.options.inter_token_s * n)
                handler._json(200, self._whole(path, arrival, n))  # type: ignore[attr-defined]
        finally:
            with self._lock:
                self._in_flight -= 1

    def _whole(self, path: str, arrival: Arrival, n: int) -> dict[str, Any]:
        text = TOKEN_TEXT * n
        usage = {"prompt_tokens": arrival.prompt_tokens, "completion_tokens": n,
                 "total_tokens": arrival.prompt_tokens + n}
        if path.endswith("/chat/completions"):
            return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                    "model": arrival.model, "usage": usage, "choices": [{
                        "index": 0, "finish_reason": "length",
                        "message": {"role": "assistant", "content": text}}]}
        return {"id": "cmpl-test", "object": "text_completion", "created": int(time.time()),
                "model": arrival.model, "usage": usage,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}]}

    def _stream(self, handler: BaseHTTPRequestHandler, path: str, arrival: Arrival,
                n: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        chat = path.endswith("/chat/completions")
        time.sleep(self.options.ttft_s)
        for i in range(n):
            if i:
                time.sleep(self.options.inter_token_s)
            if chat:
                chunk = {"id": "chatcmpl-test", "object": "chat.completion.chunk",
                         "model": arrival.model, "choices": [{
                             "index": 0, "finish_reason": None,
                             "delta": {"content": TOKEN_TEXT} if i else
                             {"role": "assistant", "content": TOKEN_TEXT}}]}
            else:
                chunk = {"id": "cmpl-test", "object": "text_completion", "model": arrival.model,
                         "choices": [{"index": 0, "text": TOKEN_TEXT, "finish_reason": None}]}
            handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            handler.wfile.flush()
        last = {"id": "chatcmpl-test" if chat else "cmpl-test",
                "object": "chat.completion.chunk" if chat else "text_completion",
                "model": arrival.model,
                "choices": [{"index": 0, "finish_reason": "length",
                             **({"delta": {}} if chat else {"text": ""})}],
                "usage": {"prompt_tokens": arrival.prompt_tokens, "completion_tokens": n,
                          "total_tokens": arrival.prompt_tokens + n}}
        handler.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True
