"""Request counting for the local stack (`infercrane local serve --count-requests`; off by default).

What a deployment would be billed for, counted where the local stack serves it, so the bench can
price a run (bench/figures/costs.py, docs/bench.md "Cost model"): the gateway counts its requests,
each function pool its invocations and the CPU seconds its environments report per invocation,
and `CountingMotoServer` wraps moto's WSGI application in `CountingApp`, which reads every AWS
request and its answer once served and counts them as the services bill them:

- SQS: requests, each 64 KiB of a request's payload (sends) or answer (receives) one more;
  receives that returned nothing apart (a poller's fixed cost, not one per observation);
- S3: requests by price class (PUT, COPY, POST and LIST one class; GET and HEAD another;
  DELETE free), bytes PUT, and PUTs per key prefix (the key up to its last `/`, S3's unit of
  request rate);
- DynamoDB: requests by operation, write request units (each item written rounded up to 1 KiB,
  twice in a transaction), read request units (each item read, or each Query/Scan page, rounded
  up to 4 KiB; half for an eventually consistent read, twice in a transaction), bytes written,
  and write units per partition key (`<table>|<pk>`, DynamoDB's unit of write rate).

Sizes follow DynamoDB's rule (attribute names plus values; numbers by their significant digits).
An UpdateItem or DeleteItem is counted from what its request carries (key and values, at least
one unit) unless its answer returns the item: a lower bound for large updated items, which no
ingest path writes. Counting buffers each request and answer and parses their JSON, so it
costs CPU: it is for measuring requests, not speed, and stays off unless asked for.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("infercrane.local")

SQS_CHUNK = 64 * 1024  # SQS bills each 64 KiB of a payload as one request
WRITE_UNIT = 1024  # DynamoDB: one write request unit per KiB of an item written
READ_UNIT = 4096  # one read request unit per 4 KiB read (strongly consistent)
_SERVICE = re.compile(r"/([a-z0-9-]+)/aws4_request")
_S3_PUT_CLASS = {"PUT", "POST"}


def _value_size(value: dict[str, Any]) -> int:
    """DynamoDB's size of one attribute value (docs: "Item sizes and formats")."""
    (kind, raw), = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        # Significant digits only: sign, point, exponent and leading or trailing zeros are not.
        mantissa = raw.lower().partition("e")[0].lstrip("+-").replace(".", "")
        return (len(mantissa.strip("0")) + 1) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(raw))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in raw)
    if kind == "NS":
        return sum(_value_size({"N": n}) for n in raw)
    if kind == "BS":
        return sum(len(base64.b64decode(b)) for b in raw)
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in raw.items())
    return len(json.dumps(raw))


def item_size(item: dict[str, Any]) -> int:
    """Bytes of an item as DynamoDB sizes it: each attribute's name plus its value."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _units(size: int, unit: int) -> int:
    return max(1, math.ceil(size / unit))


class RequestCounts:
    """The counters of one local stack (thread-safe). `snapshot()` is what `/_local/counts`
    answers; a run's requests are the difference of two snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.gateway: Counter[str] = Counter()
        self.sqs: Counter[str] = Counter()
        self.s3: Counter[str] = Counter()
        self.s3_prefixes: Counter[str] = Counter()
        self.dynamodb: Counter[str] = Counter()
        self.dynamodb_keys: Counter[str] = Counter()
        self.units: Counter[str] = Counter()  # wru, rru, bytes written/put, billed SQS requests

    def gateway_request(self, route: str) -> None:
        with self._lock:
            self.gateway[route] += 1

    def snapshot(self, lambdas: dict[str, dict[str, float]]) -> dict[str, Any]:
        with self._lock:
            return {
                "api_gateway": {"requests": sum(self.gateway.values()),
                                "routes": dict(self.gateway)},
                "lambda": lambdas,
                "sqs": {"requests": dict(self.sqs), "billed": self.units["sqs_billed"],
                        "empty_receives": self.units["sqs_empty_receives"]},
                "s3": {"requests": dict(self.s3), "bytes_put": self.units["s3_bytes_put"],
                       "put_prefixes": dict(self.s3_prefixes)},
                "dynamodb": {"requests": dict(self.dynamodb), "wru": self.units["wru"],
                             "rru": self.units["rru"] / 2,  # counted in halves
                             "bytes_written": self.units["ddb_bytes_written"],
                             "write_units_by_key": dict(self.dynamodb_keys)},
            }

    def record(self, environ: dict[str, Any], body: bytes, answer: bytes) -> None:
        auth = environ.get("HTTP_AUTHORIZATION", "") or environ.get("QUERY_STRING", "")
        found = _SERVICE.search(auth.replace("%2F", "/"))
        service = found.group(1) if found else ""
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        with self._lock:
            if service == "dynamodb":
                self._dynamodb(target.rpartition(".")[2], body, answer)
            elif service == "sqs":
                self._sqs(target.rpartition(".")[2] or _form_action(body), body, answer)
            elif service == "s3":
                self._s3(environ, body)

    def _sqs(self, action: str, body: bytes, answer: bytes) -> None:
        self.sqs[action] += 1
        if action.startswith("Send"):
            self.units["sqs_billed"] += _units(len(body), SQS_CHUNK)
        elif action == "ReceiveMessage":
            self.units["sqs_billed"] += _units(len(answer), SQS_CHUNK)
            if b"<Message>" not in answer and b'"Body"' not in answer:
                self.units["sqs_empty_receives"] += 1
        else:
            self.units["sqs_billed"] += 1

    def _s3(self, environ: dict[str, Any], body: bytes) -> None:
        method = environ.get("REQUEST_METHOD", "GET")
        parts = environ.get("PATH_INFO", "/").lstrip("/").split("/", 1)
        has_key = len(parts) == 2 and parts[1] != ""
        if method in _S3_PUT_CLASS:
            kind = "PUT"  # PUT, COPY (a PUT with a source header) and POST share one price
        elif method in ("GET", "HEAD"):
            kind = "GET" if has_key or method == "HEAD" else "LIST"
        else:
            kind = method  # DELETE and anything else: counted, not priced
        self.s3[kind] += 1
        if method == "PUT" and has_key:
            self.units["s3_bytes_put"] += len(body)
            self.s3_prefixes[f"{parts[0]}/{parts[1].rpartition('/')[0]}"] += 1

    def _write(self, table: str, item: dict[str, Any], factor: int = 1,
               size: int | None = None) -> None:
        size = item_size(item) if size is None else size
        units = _units(size, WRITE_UNIT) * factor
        self.units["wru"] += units
        self.units["ddb_bytes_written"] += size
        pk = item.get("pk", {}).get("S", "") if isinstance(item.get("pk"), dict) else ""
        self.dynamodb_keys[f"{table}|{pk}"] += units

    def _read(self, sizes: Iterable[int], consistent: bool, factor: int = 1) -> None:
        halves = 2 if consistent else 1
        self.units["rru"] += sum(_units(s, READ_UNIT) for s in sizes) * halves * factor

    def _dynamodb(self, op: str, body: bytes, answer: bytes) -> None:
        self.dynamodb[op] += 1
        handler = _DYNAMO_OPS.get(op)
        if handler is None:
            return
        try:
            req, res = json.loads(body or b"{}"), json.loads(answer or b"{}")
        except ValueError:
            return
        handler(self, req, res)


def _put_item(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    c._write(req["TableName"], req["Item"])


def _keyed_write(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    returned = res.get("Attributes")
    size = item_size(returned) if returned else item_size(req["Key"]) + item_size(
        req.get("ExpressionAttributeValues", {}))
    c._write(req["TableName"], req["Key"], size=size)


def _batch_write(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    for table, writes in req.get("RequestItems", {}).items():
        for w in writes:
            if "PutRequest" in w:
                c._write(table, w["PutRequest"]["Item"])
            else:
                c._write(table, w["DeleteRequest"]["Key"])


def _transact_write(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    for entry in req.get("TransactItems", []):
        (kind, op), = entry.items()
        if kind == "Put":
            c._write(op["TableName"], op["Item"], factor=2)
        else:
            c._write(op["TableName"], op["Key"], factor=2, size=item_size(op["Key"]) + item_size(
                op.get("ExpressionAttributeValues", {})))


def _get_item(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    c._read([item_size(res.get("Item", {}))], bool(req.get("ConsistentRead")))


def _batch_get(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    for table, spec in req.get("RequestItems", {}).items():
        found = [item_size(i) for i in res.get("Responses", {}).get(table, [])]
        missing = max(0, len(spec.get("Keys", [])) - len(found))  # a key not found: one unit
        c._read(found + [0] * missing, bool(spec.get("ConsistentRead")))


def _query(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    c._read([sum(item_size(i) for i in res.get("Items", []))], bool(req.get("ConsistentRead")))


def _transact_get(c: RequestCounts, req: dict[str, Any], res: dict[str, Any]) -> None:
    c._read([item_size(r.get("Item", {})) for r in res.get("Responses", [])], True, factor=2)


_DYNAMO_OPS: dict[str, Callable[[RequestCounts, dict[str, Any], dict[str, Any]], None]] = {
    "PutItem": _put_item, "UpdateItem": _keyed_write, "DeleteItem": _keyed_write,
    "BatchWriteItem": _batch_write, "TransactWriteItems": _transact_write,
    "GetItem": _get_item, "BatchGetItem": _batch_get, "Query": _query, "Scan": _query,
    "TransactGetItems": _transact_get,
}


def _form_action(body: bytes) -> str:
    found = re.search(rb"(?:^|&)Action=([A-Za-z]+)", body)
    return found.group(1).decode() if found else "unknown"


class CountingApp:
    """WSGI middleware: serves each request with the wrapped app, then counts it."""

    def __init__(self, app: Any, counts: RequestCounts):
        self.app = app
        self.counts = counts

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        length = environ.get("CONTENT_LENGTH") or ""
        stream = environ["wsgi.input"]
        if length.isdigit():
            body = stream.read(int(length))
        elif environ.get("wsgi.input_terminated"):
            body = stream.read()
        else:
            body = b""
        environ["wsgi.input"] = io.BytesIO(body)
        result = self.app(environ, start_response)
        try:
            chunks = list(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        try:
            self.counts.record(environ, body, b"".join(chunks))
        except Exception:  # a request counting cannot read must still be served
            log.exception("request counting failed for %s %s", environ.get("REQUEST_METHOD"),
                          environ.get("PATH_INFO"))
        return chunks


def counting_moto_server(counts: RequestCounts, **kwargs: Any) -> Any:
    """moto's ThreadedMotoServer whose application is wrapped in `CountingApp`."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class CountingMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:  # moto's own, with the app wrapped
            app = CountingApp(DomainDispatcherApplication(create_backend_app), counts)
            self._server = make_server(self._ip_address, self._port, app, True,
                                       request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    return CountingMotoServer(**kwargs)
