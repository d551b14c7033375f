"""local/moto_atomic.py decides what moto's own TransactWriteItems decides, and makes a
conditional write atomic across threads.

Oracle: moto's unpatched TransactWriteItems, given the same sequence (a commit, a cancellation
with reasons and old items, a condition check with an update, an item over the size limit part
way through, duplicate keys, too many actions): the same answers, errors and stored items."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from infercrane.local import moto_atomic
from tests.support.dynamo import create_pk_sk_table

TABLE = "T"


@pytest.fixture
def native() -> Iterator[None]:
    """moto's own code for the test, whatever the session installed; put back after."""
    was = bool(moto_atomic._originals)
    moto_atomic.uninstall()
    yield
    if was:
        moto_atomic.install()


def put(i: int, **extra: Any) -> dict[str, Any]:
    return {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "p"}, "sk": {"S": f"{i:03d}"},
                                                  "n": {"N": str(i)}, **extra},
                    "ConditionExpression": "attribute_not_exists(sk)"}}


def run(ddb: Any) -> list[Any]:
    out: list[Any] = []

    def record(**kwargs: Any) -> None:
        try:
            answer = ddb.transact_write_items(**kwargs)
            answer.pop("ResponseMetadata", None)
            out.append(answer)
        except ClientError as exc:
            out.append((exc.response["Error"]["Code"], exc.response.get("CancellationReasons")))

    record(TransactItems=[put(i) for i in range(5)])
    record(TransactItems=[put(i) for i in range(3, 8)])  # 3, 4 exist: cancelled, 5-7 not written
    failing = put(1)
    failing["Put"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    record(TransactItems=[put(9), failing])
    record(TransactItems=[
        {"ConditionCheck": {"TableName": TABLE, "Key": {"pk": {"S": "p"}, "sk": {"S": "000"}},
                            "ConditionExpression": "n = :z",
                            "ExpressionAttributeValues": {":z": {"N": "0"}}}},
        {"Update": {"TableName": TABLE, "Key": {"pk": {"S": "p"}, "sk": {"S": "002"}},
                    "UpdateExpression": "SET n = n + :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": "p"}, "sk": {"S": "004"}}}}])
    record(TransactItems=[put(20), put(21, pad={"S": "x" * 410_000}), put(22)])  # too large
    record(TransactItems=[put(30), put(30)])  # one item twice
    record(TransactItems=[put(100 + i) for i in range(101)])
    scan = ddb.scan(TableName=TABLE, ConsistentRead=True)["Items"]
    out.append(sorted(scan, key=lambda i: i["sk"]["S"]))
    return out


def outcomes(installed: bool) -> list[Any]:
    if installed:
        moto_atomic.install()
    try:
        with mock_aws():
            ddb = boto3.client("dynamodb", region_name="us-east-1")
            create_pk_sk_table(ddb, TABLE)
            return run(ddb)
    finally:
        moto_atomic.uninstall()


def test_transactions_answer_and_store_as_moto_s_own(native):
    mine, theirs = outcomes(installed=True), outcomes(installed=False)
    assert mine == theirs
    codes = [o[0] for o in theirs if isinstance(o, tuple)]
    # The sequence reaches the refusals it compares, not just the happy path.
    assert codes.count("TransactionCanceledException") == 2
    assert "ValidationException" in codes
    assert [i["sk"]["S"] for i in theirs[-1]] == ["000", "001", "002", "003"]


def test_of_many_threads_writing_one_key_conditionally_exactly_one_succeeds(native):
    moto_atomic.install()
    try:
        with mock_aws():
            ddb = boto3.client("dynamodb", region_name="us-east-1")
            create_pk_sk_table(ddb, TABLE)

            def attempt(job: tuple[int, int]) -> bool:
                key, writer = job
                try:
                    ddb.put_item(TableName=TABLE, ConditionExpression="attribute_not_exists(sk)",
                                 Item={"pk": {"S": "p"}, "sk": {"S": str(key)},
                                       "w": {"N": str(writer)}})
                    return True
                except ClientError:
                    return False

            jobs = [(key, writer) for key in range(40) for writer in range(6)]
            with ThreadPoolExecutor(6) as pool:
                won = list(pool.map(attempt, jobs))
            by_key = {k: sum(w for (key, _), w in zip(jobs, won, strict=True) if key == k)
                      for k in range(40)}
            assert set(by_key.values()) == {1}
    finally:
        moto_atomic.uninstall()
