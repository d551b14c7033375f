"""`local serve --count-requests` counts requests as AWS bills them (local/counting.py). The
expected units are worked out by hand from the services' published billing rules, not from the
counter's code."""

from __future__ import annotations

import io
import json
from typing import Any

from infercrane.local.counting import CountingApp, RequestCounts, item_size


class Echo:
    """A WSGI app answering a fixed body; it records the request body it read."""

    def __init__(self, answer: dict[str, Any] | bytes):
        self.answer = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.read: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.read.append(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [self.answer]


def serve(counts: RequestCounts, answer: dict[str, Any] | bytes, body: bytes, service: str,
          target: str = "", method: str = "POST", path: str = "/") -> Echo:
    app = Echo(answer)
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "CONTENT_LENGTH": str(len(body)),
               "wsgi.input": io.BytesIO(body), "HTTP_X_AMZ_TARGET": target,
               "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=AKIA/20261203/us-east-1/"
                                     f"{service}/aws4_request, SignedHeaders=host, Signature=x"}
    out = CountingApp(app, counts)(environ, lambda *a: None)
    assert b"".join(out) == app.answer
    return app


def ddb(counts: RequestCounts, op: str, req: dict[str, Any], res: dict[str, Any]) -> None:
    body = json.dumps(req).encode()
    app = serve(counts, res, body, "dynamodb", f"DynamoDB_20120810.{op}")
    assert app.read == [body]  # the wrapped app still reads the whole request


def snap(counts: RequestCounts) -> dict[str, Any]:
    return counts.snapshot({})


def test_item_size_follows_dynamodbs_rule_for_names_strings_and_numbers() -> None:
    # "pk" (2) + "abc" (3); "n" (1) + 1000 -> one significant digit: 1 + 1 = 2 bytes;
    # "m" (1) + 123.45 -> five digits: 3 + 1 = 4 bytes; "b" (1) + BOOL (1).
    assert item_size({"pk": {"S": "abc"}}) == 5
    assert item_size({"n": {"N": "1000"}}) == 3
    assert item_size({"m": {"N": "-123.45"}}) == 5
    assert item_size({"b": {"BOOL": True}}) == 2


def test_batch_writes_round_each_item_up_to_a_kib_and_count_units_per_partition_key() -> None:
    counts = RequestCounts()
    big = {"pk": {"S": "t#d"}, "sk": {"S": "1"}, "body": {"S": "x" * 1500}}
    small = {"pk": {"S": "t#d"}, "sk": {"S": "2"}}
    other = {"pk": {"S": "t#e"}, "sk": {"S": "3"}}
    ddb(counts, "BatchWriteItem", {"RequestItems": {"Obs": [
        {"PutRequest": {"Item": big}}, {"PutRequest": {"Item": small}},
        {"PutRequest": {"Item": other}}]}}, {"UnprocessedItems": {}})
    got = snap(counts)["dynamodb"]
    assert got["wru"] == 2 + 1 + 1
    assert got["write_units_by_key"] == {"Obs|t#d": 3, "Obs|t#e": 1}
    assert got["requests"] == {"BatchWriteItem": 1}


def test_a_transaction_costs_twice_the_units_of_its_writes() -> None:
    counts = RequestCounts()
    ddb(counts, "TransactWriteItems", {"TransactItems": [
        {"Put": {"TableName": "Obs", "Item": {"pk": {"S": "k"}, "v": {"S": "y" * 2000}}}},
        {"ConditionCheck": {"TableName": "Obs", "Key": {"pk": {"S": "k"}}}}]}, {})
    assert snap(counts)["dynamodb"]["wru"] == 2 * 2 + 2 * 1


def test_reads_round_up_to_4_kib_a_missing_key_costs_one_and_eventual_reads_half() -> None:
    counts = RequestCounts()
    found = {"pk": {"S": "a"}, "v": {"S": "z" * 5000}}  # 5,006 bytes: 2 units
    ddb(counts, "BatchGetItem", {"RequestItems": {"Obs": {
        "Keys": [{"pk": {"S": "a"}}, {"pk": {"S": "b"}}, {"pk": {"S": "c"}}],
        "ConsistentRead": True}}}, {"Responses": {"Obs": [found]}})
    assert snap(counts)["dynamodb"]["rru"] == 2 + 1 + 1
    # A Query page is sized as a whole: 2 x 5,006 bytes = 3 units, eventually consistent: 1.5.
    ddb(counts, "Query", {"TableName": "Obs"}, {"Items": [found, found]})
    assert snap(counts)["dynamodb"]["rru"] == 4 + 1.5


def test_sqs_bills_each_64_kib_of_a_payload_and_counts_empty_receives_apart() -> None:
    counts = RequestCounts()
    serve(counts, {}, b"x" * (70 * 1024), "sqs", "AmazonSQS.SendMessage")
    serve(counts, {}, b"{}", "sqs", "AmazonSQS.ReceiveMessage")
    serve(counts, {"Messages": [{"Body": "m"}]}, b"{}", "sqs", "AmazonSQS.ReceiveMessage")
    got = snap(counts)["sqs"]
    assert got["requests"] == {"SendMessage": 1, "ReceiveMessage": 2}
    assert got["billed"] == 2 + 1 + 1
    assert got["empty_receives"] == 1


def test_s3_requests_are_counted_by_price_class_and_puts_by_key_prefix() -> None:
    counts = RequestCounts()
    for name in ("a.json.gz", "b.json.gz"):
        serve(counts, b"", b"data", "s3", method="PUT",
              path=f"/bucket/observations/tenant=t/hour=01/{name}")
    serve(counts, b"", b"", "s3", method="GET", path="/bucket/observations/tenant=t/hour=01/a")
    serve(counts, b"", b"", "s3", method="GET", path="/bucket")
    serve(counts, b"", b"", "s3", method="DELETE", path="/bucket/x")
    got = snap(counts)["s3"]
    assert got["requests"] == {"PUT": 2, "GET": 1, "LIST": 1, "DELETE": 1}
    assert got["bytes_put"] == 8
    assert got["put_prefixes"] == {"bucket/observations/tenant=t/hour=01": 2}


def test_a_request_counting_cannot_parse_is_still_served() -> None:
    counts = RequestCounts()
    serve(counts, b"not json", b"{broken", "dynamodb", "DynamoDB_20120810.PutItem")
    assert snap(counts)["dynamodb"] == {"requests": {"PutItem": 1}, "wru": 0, "rru": 0,
                                        "bytes_written": 0, "write_units_by_key": {}}
