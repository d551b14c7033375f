"""The local stack's write accommodations for moto decide exactly what moto's own code decides.

Oracles: moto's unpatched `Item.__init__`, request parser, host lookup and method listing. The same
BatchWriteItem / BatchGetItem sequence (every attribute type, nested maps and lists, binary values,
an item over the size limit, duplicate keys) runs with and without the accommodations: the stored
items, the answers and the errors must be identical; and every request's parameters from the fast
path must equal what moto's parser made of the same body.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from infercrane.local import moto_writes
from tests.support.dynamo import create_pk_sk_table

TABLE = "Writes"


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    moto_writes.uninstall()
    yield
    moto_writes.uninstall()


def value(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kinds = ["S", "N", "BOOL", "NULL", "SS", "NS", "B", "BS"] + (["M", "L"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "S":
        return {"S": rng.choice(["", "x", "ünïcødé ✓", "quote \" and \\ slash", "B\":"]) * rng.randint(1, 3)}
    if kind == "N":
        return {"N": rng.choice(["0", "-1", "1.5", "12345678901234567890", "1e3", "0.000001"])}
    if kind == "BOOL":
        return {"BOOL": rng.random() < 0.5}
    if kind == "NULL":
        return {"NULL": True}
    if kind == "SS":
        return {"SS": [f"s{i}" for i in range(rng.randint(1, 4))]}
    if kind == "NS":
        return {"NS": [str(i) for i in range(rng.randint(1, 4))]}
    if kind == "B":
        return {"B": bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))}
    if kind == "BS":
        return {"BS": [bytes([i, 1]) for i in range(rng.randint(1, 3))]}
    if kind == "M":
        return {"M": {f"k{i}": value(rng, depth + 1) for i in range(rng.randint(0, 3))}}
    return {"L": [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]}


def item(rng: random.Random, i: int, binary: bool) -> dict[str, Any]:
    out = {"pk": {"S": f"p{i % 3}"}, "sk": {"S": f"{i:05d}#obs"}}
    for n in range(rng.randint(1, 25)):
        attr = value(rng)
        while not binary and ("'B':" in repr(attr) or "'BS':" in repr(attr)):
            attr = value(rng)
        out[f"a{n}"] = attr
    return out


def run(ddb: Any, rng: random.Random) -> list[Any]:
    """A write/read sequence; every answer or error, in order."""
    outcomes: list[Any] = []

    def record(fn: Any, **kwargs: Any) -> None:
        try:
            answer = fn(**kwargs)
            answer.pop("ResponseMetadata", None)
            outcomes.append(answer)
        except ClientError as exc:
            outcomes.append(("error", exc.response["Error"]["Code"], exc.response["Error"]["Message"]))

    for b in range(4):
        items = [item(rng, b * 25 + i, binary=b % 2 == 1) for i in range(25)]
        record(ddb.batch_write_item, RequestItems={TABLE: [{"PutRequest": {"Item": it}} for it in items]})
        keys = [{"pk": it["pk"], "sk": it["sk"]} for it in items] + [
            {"pk": {"S": "p0"}, "sk": {"S": f"missing-{b}"}}]
        record(ddb.batch_get_item, RequestItems={TABLE: {"Keys": keys, "ConsistentRead": True}})
        record(ddb.batch_get_item, RequestItems={TABLE: {
            "Keys": keys, "ProjectionExpression": "pk, sk, #a", "ExpressionAttributeNames": {"#a": "a0"}}})
    # Over moto's 405,000-byte item bound, just under it, and exactly at the boundary's sides.
    for size in (404_000, 404_990, 405_000, 406_000):
        big = {"pk": {"S": "big"}, "sk": {"S": str(size)}, "pad": {"S": "x" * (size - 20)},
               "after": {"N": "12"}}
        record(ddb.batch_write_item, RequestItems={TABLE: [{"PutRequest": {"Item": big}}]})
        big["after"] = {"N": "not-a-number"}  # which refusal wins: the same as moto's
        record(ddb.batch_write_item, RequestItems={TABLE: [{"PutRequest": {"Item": big}}]})
    dup = {"pk": {"S": "d"}, "sk": {"S": "1"}}
    record(ddb.batch_write_item, RequestItems={TABLE: [{"PutRequest": {"Item": dup}}] * 2})
    record(ddb.batch_write_item, RequestItems={TABLE: [
        {"PutRequest": {"Item": {"pk": {"S": "k"}, "sk": {"N": "1"}}}}]})  # wrong key type
    record(ddb.batch_write_item, RequestItems={TABLE: [
        {"PutRequest": {"Item": {"pk": {"S": ""}, "sk": {"S": "1"}}}}]})  # empty key
    record(ddb.batch_write_item, RequestItems={TABLE: [{"DeleteRequest": {"Key": {
        "pk": {"S": "p0"}, "sk": {"S": "00000#obs"}}}}]})
    record(ddb.batch_write_item, RequestItems={"NoSuchTable": [{"PutRequest": {"Item": dup}}]})
    record(ddb.batch_get_item, RequestItems={TABLE: {"Keys": [dup] * 2}})
    fresh = [item(rng, 500 + i, binary=False) for i in range(10)]
    for _ in range(2):  # the second is cancelled: every condition fails
        record(ddb.transact_write_items, ClientRequestToken=f"t{_}", TransactItems=[
            {"Put": {"TableName": TABLE, "Item": it, "ConditionExpression": "attribute_not_exists(sk)"}}
            for it in fresh])
    scan = ddb.scan(TableName=TABLE, ConsistentRead=True)["Items"]
    outcomes.append(sorted(scan, key=lambda i: (i["pk"]["S"], i["sk"]["S"])))
    return outcomes


def session_outcomes(installed: bool) -> list[Any]:
    if installed:
        moto_writes.install()
    try:
        with mock_aws():
            ddb = boto3.client("dynamodb", region_name="us-east-1")
            create_pk_sk_table(ddb, TABLE)
            return run(ddb, random.Random(11))
    finally:
        moto_writes.uninstall()


def normalized(outcomes: list[Any]) -> list[Any]:
    """Answers without what differs between any two moto sessions (request ids, capacity)."""
    out = []
    for outcome in outcomes:
        o = outcome
        if isinstance(o, dict):
            o = {k: v for k, v in o.items() if k != "ConsumedCapacity"}
            if "Responses" in o:  # BatchGetItem answers in no particular order
                o["Responses"] = {t: sorted(rows, key=repr) for t, rows in o["Responses"].items()}
        out.append(o)
    return out


def test_writes_reads_and_errors_are_moto_s_own():
    plain, fast = session_outcomes(installed=False), session_outcomes(installed=True)
    assert normalized(fast) == normalized(plain)
    errors = [o for o in plain if isinstance(o, tuple)]
    # The sequence reaches the refusals it is meant to compare, not just the happy path.
    assert any("size" in o[2].lower() for o in errors)
    assert any("duplicates" in o[2] for o in errors)
    assert len(errors) >= 6


def test_fast_parameters_equal_moto_s_parser_for_every_request(monkeypatch):
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.parse_parameters
    seen: list[tuple[str, Any, Any]] = []

    def spy(self: Any, request: Any) -> None:
        original(self, request)
        action = self._get_action()
        seen.append((action, moto_writes.plain_parameters(action, request.data), self.params))

    monkeypatch.setattr(DynamoHandler, "parse_parameters", spy)
    session_outcomes(installed=False)
    fast = [(a, f, p) for a, f, p in seen if f is not None]
    assert {a for a, _, _ in fast} == {"BatchWriteItem", "BatchGetItem", "TransactWriteItems"}
    for action, params_fast, params_moto in fast:
        assert params_fast == params_moto, action
    # Binary values are decoded by the parser: those requests are left to it.
    binary = [p for a, f, p in seen if a == "BatchWriteItem" and f is None]
    assert binary and all("B" in repr(p) for p in binary)


def test_an_item_is_built_as_moto_builds_it():
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    rng = random.Random(3)
    original = moto_writes._originals.get("item_init") or Item.__init__
    for n in range(300):
        attrs = {f"a{i}": value(rng) for i in range(rng.randint(0, 30))}
        if n % 10 == 0:  # around the size bound
            attrs["pad"] = {"S": "é" * rng.randint(202_000, 203_000)}
        ours, theirs = Item.__new__(Item), Item.__new__(Item)
        outcome = []
        for target, init in ((ours, moto_writes.item_init), (theirs, original)):
            try:
                init(target, DynamoType({"S": "h"}), None, attrs)
                outcome.append(target.to_json())
            except ItemSizeTooLarge:
                outcome.append("too large")
        assert outcome[0] == outcome[1]


def test_the_remembered_lookups_answer_as_moto_does():
    import moto.core.responses as core_responses
    from moto.dynamodb.responses import DynamoHandler
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    hosts = ["dynamodb.us-east-1.amazonaws.com", "sqs.us-east-1.amazonaws.com", "s3", "moto_api",
             None, "nothing.example"]
    before = [app.get_backend_for_host(h) for h in hosts]
    names = core_responses.method_names_from_class(DynamoHandler)
    moto_writes.install()
    moto_writes.install()  # idempotent
    for _ in range(2):  # computed, then remembered
        assert [app.get_backend_for_host(h) for h in hosts] == before
    assert core_responses.method_names_from_class(DynamoHandler) == names
    moto_writes.uninstall()
    assert DomainDispatcherApplication.get_backend_for_host.__name__ == "get_backend_for_host"


def test_binary_bodies_are_left_to_the_parser():
    body = base64.b64encode(b"x").decode()
    assert moto_writes.plain_parameters("BatchWriteItem", f'{{"a":{{"B":"{body}"}}}}'.encode()) is None
    assert moto_writes.plain_parameters("PutItem", b'{"TableName":"t"}') is None
    assert moto_writes.plain_parameters("BatchGetItem", b"[1]") is None
    assert moto_writes.plain_parameters("BatchGetItem", b"{not json") is None
    assert moto_writes.plain_parameters("BatchGetItem", b'{"RequestItems":{}}') == {"RequestItems": {}}
