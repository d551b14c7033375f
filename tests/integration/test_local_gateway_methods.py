"""The local gateway answers every method and every malformed request line as API Gateway does:
in the envelope (an unknown method or route is a 404 here, API Gateway's 403 with our template's
envelope), never the standard library's 501 HTML page or a dropped connection."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from infercrane.local.gateway import Gateway, GatewayServer, serve
from infercrane.local.template import ApiRoute

ROUTES = [ApiRoute("Api", "GET", "/v1/traces", "default"),
          ApiRoute("Api", "POST", "/v1/observations", "default")]


@pytest.fixture(scope="module")
def address() -> Iterator[tuple[str, int]]:
    server: GatewayServer
    server, thread = serve(Gateway(ROUTES, {}, None, "icadmin"), "127.0.0.1", 0)
    try:
        yield server.server_address[:2]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def exchange(address: tuple[str, int], request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One raw request; the status, headers and body of the answer (read until the server closes
    or the declared length is in)."""
    with socket.create_connection(address, timeout=10) as conn:
        conn.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            assert chunk, f"connection closed without an answer: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        want = 0 if request.startswith(b"HEAD ") else int(headers.get("content-length", "0"))
        while len(body) < want:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return int(lines[0].split()[1]), headers, body


def envelope(body: bytes) -> dict[str, object]:
    doc = json.loads(body)
    assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message", "field"}
    return doc["error"]


@pytest.mark.parametrize("method", ["OPTIONS", "TRACE", "PROPFIND", "FOO", "DELETE"])
def test_a_method_no_route_defines_is_a_404_envelope(address, method):
    status, headers, body = exchange(
        address, f"{method} /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
    assert status == 404
    assert headers["content-type"] == "application/json"
    assert envelope(body)["code"] == "not_found"


def test_head_is_answered_with_headers_and_no_body(address):
    status, headers, body = exchange(address, b"HEAD /v1/traces HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404 and int(headers["content-length"]) > 0 and body == b""


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "12 34", "99999999999999999999"])
def test_a_malformed_content_length_is_a_400_envelope(address, length):
    status, _, body = exchange(address, (f"POST /v1/observations HTTP/1.1\r\nHost: x\r\n"
                                         f"Content-Length: {length}\r\n\r\n{{}}").encode())
    assert status == 400
    assert envelope(body)["code"] == "bad_request"


@pytest.mark.parametrize(("request_line", "status"), [
    (b"GARBAGE\r\n\r\n", 400), (b"GET /v1/traces HTTP/9.9\r\n\r\n", 505),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414)])
def test_the_standard_librarys_own_refusals_are_envelopes_too(address, request_line, status):
    got, headers, body = exchange(address, request_line)
    assert got == status
    assert headers["content-type"] == "application/json"
    envelope(body)
