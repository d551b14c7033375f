"""Query pages read with `json.loads` (adapters/dynamo/base.py) equal what botocore's own parser
returns. Oracle: the same Query through a client without the handler."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from infercrane.adapters.dynamo.base import _items_as_json
from tests.support.dynamo import create_pk_sk_table

TABLE = "Shapes"
SEEN: list[bool] = []  # whether the handler took each page's Items (so the test can fail)


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        plain = boto3.client("dynamodb", region_name="us-east-1")
        fast = boto3.client("dynamodb", region_name="us-east-1")
        fast.meta.events.register("before-parse.dynamodb.Query", _items_as_json)
        fast.meta.events.register(
            "before-parse.dynamodb.Query",
            lambda customized_response_dict, **_: SEEN.append("Items" in customized_response_dict))
        create_pk_sk_table(plain, TABLE)
        for i in range(30):
            plain.put_item(TableName=TABLE, Item={
                "pk": {"S": "plain"}, "sk": {"S": f"{i:03d}"}, "n": {"N": str(i * 1.5)},
                "big": {"N": "123456789012345678901234567890"}, "t": {"BOOL": i % 2 == 0},
                "z": {"NULL": True}, "text": {"S": 'quoted "B": {"BS": x} \u00e9'},
                "l": {"L": [{"N": "-0"}, {"S": ""}, {"M": {"k": {"SS": ["a", "b"]}}}]},
                "ns": {"NS": ["1", "2.5"]}})
        plain.put_item(TableName=TABLE, Item={"pk": {"S": "binary"}, "sk": {"S": "1"},
                                              "b": {"B": b"\x00\xff"}, "bs": {"BS": [b"x"]}})
        plain.put_item(TableName=TABLE, Item={"pk": {"S": "binary"}, "sk": {"S": "2"},
                                              "m": {"M": {"B": {"S": "a map key named B"}}}})
        yield plain, fast


def pages(client: Any, pk: str, limit: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    args: dict[str, Any] = {"TableName": TABLE, "KeyConditionExpression": "pk = :p",
                            "ExpressionAttributeValues": {":p": {"S": pk}}, "Limit": limit,
                            "ReturnConsumedCapacity": "TOTAL"}
    while True:
        page = client.query(**args)
        page.pop("ResponseMetadata")
        out.append(page)
        if "LastEvaluatedKey" not in page:
            return out
        args["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@pytest.mark.parametrize(("pk", "limit"), [("plain", 7), ("plain", 100), ("binary", 1),
                                           ("none", 5)])
def test_pages_equal_botocore_own_parse(clients: tuple[Any, Any], pk: str, limit: int) -> None:
    plain, fast = clients
    expected = pages(plain, pk, limit)
    SEEN.clear()
    assert pages(fast, pk, limit) == expected
    # Binary pages are left to botocore's parser; every other page skipped it.
    assert [pk != "binary"] * len(expected) == SEEN
    if pk == "binary":
        assert expected[0]["Items"][0]["b"] == {"B": b"\x00\xff"}


def test_errors_still_raise_as_client_errors(clients: tuple[Any, Any]) -> None:
    _, fast = clients
    with pytest.raises(fast.exceptions.ResourceNotFoundException):
        fast.query(TableName="Missing", KeyConditionExpression="pk = :p",
                   ExpressionAttributeValues={":p": {"S": "x"}})
