"""The counting wrapper around moto's server sees what botocore really sends: S3 PUTs by key
prefix, DynamoDB write units by partition key, SQS requests in 64 KiB chunks. Expected values are
worked out from the services' billing rules and the requests made here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from infercrane.local.counting import RequestCounts, counting_moto_server


@pytest.fixture
def counted() -> Iterator[tuple[RequestCounts, Any]]:
    counts = RequestCounts()
    server = counting_moto_server(counts, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                    region_name="us-east-1")
    try:
        yield counts, lambda service: session.client(service, endpoint_url=f"http://{host}:{port}")
    finally:
        server.stop()


def test_s3_puts_are_counted_per_prefix_and_lists_and_gets_apart(counted) -> None:
    counts, client = counted
    s3 = client("s3")
    s3.create_bucket(Bucket="docs")
    for name in ("a", "b"):
        s3.put_object(Bucket="docs", Key=f"observations/tenant=t/hour=01/{name}.json.gz",
                      Body=b"x" * 100, IfNoneMatch="*")
    s3.get_object(Bucket="docs", Key="observations/tenant=t/hour=01/a.json.gz")
    s3.list_objects_v2(Bucket="docs", Prefix="observations/")
    got = counts.snapshot({})["s3"]
    assert got["requests"]["PUT"] == 3  # the bucket's creation, then the two objects
    assert got["requests"]["GET"] == 1
    assert got["requests"]["LIST"] == 1
    assert got["put_prefixes"] == {"docs/observations/tenant=t/hour=01": 2}
    assert got["bytes_put"] == 200


def test_dynamodb_write_units_follow_item_size_and_land_on_their_partition_key(counted) -> None:
    counts, client = counted
    ddb = client("dynamodb")
    ddb.create_table(TableName="T", BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    ddb.put_item(TableName="T", Item={"pk": {"S": "k1"}, "v": {"S": "x" * 2500}})  # 3 units
    ddb.put_item(TableName="T", Item={"pk": {"S": "k2"}})  # 1 unit
    ddb.get_item(TableName="T", Key={"pk": {"S": "k1"}}, ConsistentRead=True)  # 1 unit
    got = counts.snapshot({})["dynamodb"]
    assert got["wru"] == 4
    assert got["rru"] == 1
    assert got["write_units_by_key"] == {"T|k1": 3, "T|k2": 1}


def test_sqs_sends_are_billed_per_64_kib(counted) -> None:
    counts, client = counted
    sqs = client("sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="y" * (100 * 1024))  # 2 chunks
    got = counts.snapshot({})["sqs"]
    assert got["requests"]["SendMessage"] == 1
    assert got["billed"] == 1 + 2  # CreateQueue, then the message's two chunks
