"""The local stack's range-indexed Query answers exactly as moto's own Query does.

Oracle: moto's unpatched `Table.query` on the same table. Every query is paged to the end with
its LastEvaluatedKey, and each page (items, order, Count, ScannedCount, LastEvaluatedKey) must
match, over the main table and a GSI, key conditions of every operator, Limit, filters,
projections and ScanIndexForward=False. And its read answers (`local/moto_answers.py`, written
with `json.dumps`) parse as moto's serializer's do.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from infercrane.local import moto_answers, moto_query

TABLE = "Things"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName=TABLE, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                                  (("pk", "S"), ("sk", "S"), ("gpk", "S"), ("gsk", "N"))],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                       {"AttributeName": "sk", "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[{
                "IndexName": "gsi", "Projection": {"ProjectionType": "ALL"},
                "KeySchema": [{"AttributeName": "gpk", "KeyType": "HASH"},
                              {"AttributeName": "gsk", "KeyType": "RANGE"}]}])
        rng = random.Random(7)
        for i in range(240):
            # A few items of 300 kB in p2: its pages end at DynamoDB's 1 MB, not at a Limit.
            pad = 300_000 if i % 3 == 2 and i % 40 == 2 else rng.randrange(1, 3000)
            sk = "0500000#eq" if i == 1 else f"{rng.randrange(10**6):07d}#{i}"
            item = {"pk": {"S": f"p{i % 3}"}, "sk": {"S": sk},
                    "n": {"N": str(i)}, "pad": {"S": "x" * pad}}
            if i % 4:  # a sparse index; equal index sort keys tie-break on the table's keys
                item["gpk"] = {"S": f"g{i % 2}"}
                item["gsk"] = {"N": str(rng.randrange(50))}
            ddb.put_item(TableName=TABLE, Item=item)
        # Items changed in place after the index was first read: an update moves them.
        ddb.update_item(TableName=TABLE, Key={"pk": {"S": "p1"}, "sk": {"S": "0500000#eq"}},
                        UpdateExpression="SET gpk = :g, gsk = :k",
                        ExpressionAttributeValues={":g": {"S": "g1"}, ":k": {"N": "7"}})
        yield ddb


def pages(ddb: Any, request: dict[str, Any]) -> list[dict[str, Any]]:
    out, start = [], None
    while True:
        args = {**request, **({"ExclusiveStartKey": start} if start else {})}
        page = ddb.query(TableName=TABLE, **args)
        page.pop("ResponseMetadata", None)
        out.append(page)
        start = page.get("LastEvaluatedKey")
        if not start or len(out) > 400:
            return out


def values(**kw: Any) -> dict[str, Any]:
    return {f":{k}": v for k, v in kw.items()}


QUERIES: list[dict[str, Any]] = [
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": values(p={"S": "p1"})},
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": values(p={"S": "p1"}),
     "Limit": 7},
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": values(p={"S": "p2"}),
     "Limit": 13, "ScanIndexForward": False},
    {"KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b",
     "ExpressionAttributeValues": values(p={"S": "p0"}, a={"S": "0200000"}, b={"S": "0700000"}),
     "Limit": 11},
    {"KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :b", "ScanIndexForward": False,
     "ExpressionAttributeValues": values(p={"S": "p0"}, a={"S": "0200000"}, b={"S": "0700000"})},
    *({"KeyConditionExpression": f"pk = :p AND sk {op} :a", "Limit": 9,
       "ExpressionAttributeValues": values(p={"S": "p1"}, a={"S": "0500000#eq"}),
       "ScanIndexForward": forward}
      for op in ("<", "<=", ">", ">=", "=") for forward in (True, False)),
    {"KeyConditionExpression": "pk = :p AND begins_with(sk, :a)", "Limit": 3,
     "ExpressionAttributeValues": values(p={"S": "p2"}, a={"S": "03"})},
    {"KeyConditionExpression": "pk = :p AND begins_with(sk, :a)", "ScanIndexForward": False,
     "ExpressionAttributeValues": values(p={"S": "p2"}, a={"S": "03"})},
    {"KeyConditionExpression": "pk = :p", "FilterExpression": "n > :n", "Limit": 10,
     "ExpressionAttributeValues": values(p={"S": "p1"}, n={"N": "120"})},
    {"KeyConditionExpression": "pk = :p", "ProjectionExpression": "sk, n",
     "ExpressionAttributeValues": values(p={"S": "p0"})},
    {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": values(p={"S": "none"})},
    {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g",
     "ExpressionAttributeValues": values(g={"S": "g1"}), "Limit": 17},
    {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g", "ScanIndexForward": False,
     "ExpressionAttributeValues": values(g={"S": "g0"}), "Limit": 5},
    {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g AND gsk BETWEEN :a AND :b",
     "ExpressionAttributeValues": values(g={"S": "g1"}, a={"N": "10"}, b={"N": "20"}),
     "Limit": 4},
    {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g AND gsk < :a",
     "ExpressionAttributeValues": values(g={"S": "g0"}, a={"N": "9"}), "ScanIndexForward": False},
    {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g", "FilterExpression": "n < :n",
     "ExpressionAttributeValues": values(g={"S": "g1"}, n={"N": "60"}), "Limit": 20},
    {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g",
     "ExpressionAttributeValues": values(g={"S": "g1"})},
]


@pytest.mark.parametrize("request_", QUERIES, ids=range(len(QUERIES)))
def test_pages_match_moto_own_query(client: Any, request_: dict[str, Any]) -> None:
    moto_query.uninstall()
    expected = pages(client, request_)
    moto_query.install()
    try:
        got = pages(client, request_)
    finally:
        moto_query.uninstall()
    assert sum(p["Count"] for p in expected) > 0 or request_["ExpressionAttributeValues"].get(
        ":p") == {"S": "none"}
    assert got == expected


def test_installs_once_and_uninstalls() -> None:
    from moto.dynamodb.models.table import Table

    original = Table.query
    moto_query.install()
    moto_query.install()
    assert Table.query is moto_query.query
    moto_query.uninstall()
    assert Table.query is original


def test_answers_install_once_and_uninstall() -> None:
    from moto.dynamodb.responses import DynamoResult

    # Another test of this worker may have installed the answers already (process-wide):
    # start from moto's own, and leave the process as it was found.
    was_installed = DynamoResult.execute_result is moto_answers.execute_result
    moto_answers.uninstall()
    original = DynamoResult.execute_result
    assert original is not moto_answers.execute_result
    moto_answers.install()
    moto_answers.install()
    assert DynamoResult.execute_result is moto_answers.execute_result
    moto_answers.uninstall()
    assert DynamoResult.execute_result is original
    if was_installed:
        moto_answers.install()


def test_item_reads_parse_the_same_as_moto_serializer(client: Any) -> None:
    key = {"pk": {"S": "p1"}, "sk": {"S": "0500000#eq"}}
    client.put_item(TableName=TABLE, Item={
        "pk": {"S": "p9"}, "sk": {"S": "odd"}, "b": {"B": b"\x00\xffbytes"}, "z": {"NULL": True},
        "m": {"M": {"l": {"L": [{"N": "1.50"}, {"BOOL": False}, {"SS": ["a", "b"]}]}}}})
    odd = {"pk": {"S": "p9"}, "sk": {"S": "odd"}}

    def reads() -> list[Any]:
        answers = [client.get_item(TableName=TABLE, Key=key),
                   client.get_item(TableName=TABLE, Key=odd),
                   client.get_item(TableName=TABLE, Key={"pk": {"S": "p9"}, "sk": {"S": "no"}}),
                   client.batch_get_item(RequestItems={TABLE: {"Keys": [key, odd]}}),
                   client.scan(TableName=TABLE, Limit=25),
                   client.query(TableName=TABLE, KeyConditionExpression="pk = :p",
                                ExpressionAttributeValues={":p": {"S": "p9"}},
                                ReturnConsumedCapacity="TOTAL")]
        for answer in answers:
            answer.pop("ResponseMetadata", None)
        return answers

    moto_answers.uninstall()
    expected = reads()
    moto_answers.install()
    try:
        got = reads()
    finally:
        moto_answers.uninstall()
    assert got == expected
    assert expected[1]["Item"]["b"] == {"B": b"\x00\xffbytes"}


def test_a_write_between_pages_is_seen_by_the_next_page(client: Any) -> None:
    request = {"KeyConditionExpression": "pk = :p", "Limit": 5,
               "ExpressionAttributeValues": values(p={"S": "p7"})}
    index = {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g", "Limit": 5,
             "ExpressionAttributeValues": values(g={"S": "g7"})}

    def put(i: int) -> None:
        client.put_item(TableName=TABLE, Item={"pk": {"S": "p7"}, "sk": {"S": f"{i:03d}"},
                                               "gpk": {"S": "g7"}, "gsk": {"N": str(i % 4)}})

    moto_query.install()
    try:
        for i in range(0, 20, 2):
            put(i)
        first = pages(client, request)
        first_index = pages(client, index)
        for i in range(1, 20, 2):
            put(i)
        client.delete_item(TableName=TABLE, Key={"pk": {"S": "p7"}, "sk": {"S": "000"}})
        got, got_index = pages(client, request), pages(client, index)
    finally:
        moto_query.uninstall()
    assert sum(p["Count"] for p in first) == sum(p["Count"] for p in first_index) == 10
    assert got == pages(client, request)
    assert got_index == pages(client, index)
    assert sum(p["Count"] for p in got) == 19


def test_kept_partitions_follow_overwrites_batches_and_items_leaving_the_index(client: Any
                                                                               ) -> None:
    # The index is built by the first Query, then kept current by the write hooks; the oracle is
    # moto's own query after every change.
    index = {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g", "Limit": 4,
             "ExpressionAttributeValues": values(g={"S": "g8"})}
    moved = {"IndexName": "gsi", "KeyConditionExpression": "gpk = :g",
             "ExpressionAttributeValues": values(g={"S": "g9"})}
    base = {"KeyConditionExpression": "pk = :p", "Limit": 3,
            "ExpressionAttributeValues": values(p={"S": "p8"})}

    def item(i: int, gpk: str | None) -> dict[str, Any]:
        out = {"pk": {"S": "p8"}, "sk": {"S": f"{i:03d}"}, "n": {"N": str(i)}}
        if gpk:
            out |= {"gpk": {"S": gpk}, "gsk": {"N": str(i % 3)}}
        return out

    def answers() -> list[Any]:
        return [pages(client, r) for r in (index, moved, base)]

    def changes() -> Iterator[None]:
        client.batch_write_item(RequestItems={TABLE: [{"PutRequest": {"Item": item(i, "g8")}}
                                                      for i in range(12)]})
        yield
        client.put_item(TableName=TABLE, Item=item(3, "g9"))  # moves to another partition
        client.put_item(TableName=TABLE, Item=item(4, None))  # leaves the sparse index
        yield
        client.batch_write_item(RequestItems={TABLE: [
            {"DeleteRequest": {"Key": {"pk": {"S": "p8"}, "sk": {"S": "005"}}}},
            {"PutRequest": {"Item": item(20, "g8")}}]})
        client.delete_item(TableName=TABLE, Key={"pk": {"S": "p8"}, "sk": {"S": "003"}})
        yield

    moto_query.install()
    try:
        got = []
        for _ in changes():
            got.append(answers())
    finally:
        moto_query.uninstall()
    expected = []
    client.batch_write_item(RequestItems={TABLE: [{"DeleteRequest": {"Key": {
        "pk": {"S": "p8"}, "sk": {"S": f"{i:03d}"}}}} for i in (*range(12), 20)]})
    for _ in changes():
        expected.append(answers())
    assert got == expected
    assert sum(p["Count"] for p in got[1][1]) == 1  # the moved item, in its new partition
    assert sum(p["Count"] for p in got[2][0]) == 10


def test_strings_holding_json_nulls_take_the_json_path_and_parse_the_same(client: Any) -> None:
    item = {"pk": {"S": "p10"}, "sk": {"S": "1"},
            "groups": {"S": json.dumps([{"min": None, "B": 1, "BS": [None]}])}}
    client.put_item(TableName=TABLE, Item=item)
    request = {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": values(
        p={"S": "p10"})}
    moto_answers.uninstall()
    expected = pages(client, request)
    moto_answers.install()
    try:
        from moto.dynamodb.responses import DynamoResult

        assert moto_answers.plain_json({"Items": [item], "Count": 1}) is not None
        got = pages(client, request)
    finally:
        moto_answers.uninstall()
    assert got == expected
    assert DynamoResult.execute_result is not moto_answers.execute_result
