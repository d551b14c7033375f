"""BatchWriteItem / BatchGetItem bodies made with `json.dumps` (adapters/dynamo/base.py) are the
bytes botocore's own JSON serializer makes, or botocore makes them. Oracle: botocore's serializer
of the same client, given the same parameters."""

from __future__ import annotations

import random
from typing import Any

import botocore.config
import botocore.session
import pytest

from infercrane.adapters.dynamo import base

TABLE = "Observations"


@pytest.fixture(scope="module")
def client() -> Any:
    session = botocore.session.get_session()
    return session.create_client(
        "dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="k", aws_secret_access_key="s",
        config=botocore.config.Config(parameter_validation=False))  # as pynamodb's clients


def value(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kind = rng.choice(["S", "N", "BOOL", "NULL", "SS", "NS", "L", "M"] if depth < 3
                      else ["S", "N", "BOOL"])
    if kind == "S":
        return {"S": rng.choice(["", "x", "ünïcødé ✓ \U0001f600", 'quote " and \\ slash', "\n\t"])}
    if kind == "N":
        return {"N": rng.choice(["0", "-1", "1.5", "12345678901234567890", "1e3"])}
    if kind == "BOOL":
        return {"BOOL": rng.random() < 0.5}
    if kind == "NULL":
        return {"NULL": True}
    if kind == "SS":
        return {"SS": [f"s{i}" for i in range(rng.randint(1, 3))]}
    if kind == "NS":
        return {"NS": [str(i) for i in range(rng.randint(1, 3))]}
    if kind == "L":
        return {"L": [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]}
    return {"M": {f"k{i}": value(rng, depth + 1) for i in range(rng.randint(0, 3))}}


def item(rng: random.Random, i: int) -> dict[str, Any]:
    out = {"pk": {"S": "demo#coder"}, "sk": {"S": f"{i:013d}#o-{i}"}}
    out.update({f"a{j}": value(rng) for j in range(rng.randint(0, 8))})
    return out


def requests(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    puts = [{"PutRequest": {"Item": item(rng, i)}} for i in range(25)]
    deletes = [{"DeleteRequest": {"Key": {"pk": {"S": "p"}, "sk": {"S": f"ID#{i}"}}}}
               for i in range(5)]
    keys = [{"pk": {"S": "demo#coder"}, "sk": {"S": f"ID#{i}"}} for i in range(100)]
    return [
        ("BatchWriteItem", {"RequestItems": {TABLE: puts}, "ReturnConsumedCapacity": "TOTAL"}),
        ("BatchWriteItem", {"RequestItems": {TABLE: deletes, "Other": puts[:2]}}),
        ("BatchGetItem", {"RequestItems": {TABLE: {
            "Keys": keys, "ConsistentRead": True, "ProjectionExpression": "#0, #1, #2",
            "ExpressionAttributeNames": {"#0": "pk", "#1": "sk", "#2": "fingerprint"}}},
            "ReturnConsumedCapacity": "TOTAL"}),
        # The store's conditional writes, as pynamodb orders them (checks first, then puts).
        ("TransactWriteItems", {"TransactItems": [
            {"ConditionCheck": {"TableName": TABLE, "Key": keys[0],
                                "ConditionExpression": "fingerprint = :fp",
                                "ExpressionAttributeValues": {":fp": {"S": "ab"}}}},
            *({"Put": {"TableName": TABLE, "Item": p["PutRequest"]["Item"],
                       "ConditionExpression": "attribute_not_exists(sk)"}} for p in puts)],
            "ClientRequestToken": "a4c3c7a8-5d0b-4d5e-9c1e-0c1f3c0e9a11"}),
    ]


def serialize(client: Any, serializer: Any, operation: str, params: dict[str, Any]) -> Any:
    return serializer.serialize_to_request(params, client.meta.service_model.operation_model(
        operation))


@pytest.mark.parametrize("seed", range(20))
def test_batch_bodies_are_the_bytes_botocore_makes(client: Any, seed: int) -> None:
    fast = base._PlainJsonSerializer(client._serializer)
    for operation, params in requests(random.Random(seed)):
        expected = serialize(client, client._serializer, operation, params)
        assert base._plain_json_body(params, client.meta.service_model.operation_model(
            operation)) is not None  # the fast path took it (else this test could not fail)
        assert serialize(client, fast, operation, params) == expected


@pytest.mark.parametrize("params", [
    {"RequestItems": {TABLE: [{"PutRequest": {"Item": {"pk": {"B": b"\x00\xff"}}}}]}},
    {"RequestItems": {TABLE: [{"PutRequest": {"Item": {"pk": {"S": "a"}, "x": {"S": None}}}}]}},
    {"RequestItems": {TABLE: []}, "ReturnConsumedCapacity": None},
])
def test_what_botocore_converts_or_drops_is_left_to_botocore(client: Any,
                                                             params: dict[str, Any]) -> None:
    fast = base._PlainJsonSerializer(client._serializer)
    model = client.meta.service_model.operation_model("BatchWriteItem")
    assert base._plain_json_body(params, model) is None
    assert fast.serialize_to_request(params, model) == client._serializer.serialize_to_request(
        params, model)


def test_a_member_outside_the_input_shape_is_left_to_botocore(client: Any) -> None:
    model = client.meta.service_model.operation_model("BatchGetItem")
    assert base._plain_json_body({"RequestItems": {}, "Bogus": "x"}, model) is None


def test_other_operations_are_serialized_by_botocore(client: Any) -> None:
    fast = base._PlainJsonSerializer(client._serializer)
    params = {"TableName": TABLE, "Item": {"pk": {"S": "a"}, "sk": {"S": "b"}}}
    assert serialize(client, fast, "PutItem", params) == serialize(
        client, client._serializer, "PutItem", params)


def test_installed_only_where_botocore_does_not_validate(client: Any) -> None:
    class Conn:
        def __init__(self, c: Any) -> None:
            self.connection = type("C", (), {"client": c})()

    validating = botocore.session.get_session().create_client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    before = validating._serializer
    base.plain_json_batch_requests(Conn(validating))
    assert validating._serializer is before
    plain = botocore.session.get_session().create_client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
        config=botocore.config.Config(parameter_validation=False))
    base.plain_json_batch_requests(Conn(plain))
    base.plain_json_batch_requests(Conn(plain))
    assert isinstance(plain._serializer, base._PlainJsonSerializer)
    assert not isinstance(plain._serializer._inner, base._PlainJsonSerializer)
