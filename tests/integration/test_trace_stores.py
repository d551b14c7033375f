"""Trace headers in DynamoDB (moto) and documents in S3 (moto), through their adapters."""

from __future__ import annotations

import pytest
import requests

from infercrane.adapters.dynamo.traces import DynamoTraceStore
from infercrane.adapters.s3_documents import S3DocumentStore
from infercrane.errors import InvalidInput, NotFound


def header(digest_char: str, created_at: str, deployment: str = "coder") -> dict:
    return {"digest": "sha256:" + digest_char * 64, "created_at": created_at,
            "deployment": deployment, "sample_count": 1, "statistics": {"mean": 2047.8481687265}}


def test_a_header_is_stored_once_and_read_back_exactly(aws):
    store = aws.container.traces
    first = header("a", "2026-11-29T20:00:00.000Z")
    assert store.put_header("demo", first) is True
    assert store.put_header("demo", first | {"sample_count": 2}) is False
    assert store.get_header("demo", first["digest"]) == first


def test_another_tenant_cannot_read_a_header(aws):
    store = aws.container.traces
    store.put_header("demo", header("b", "2026-11-29T20:00:00.000Z"))
    assert store.get_header("other", "sha256:" + "b" * 64) is None


def test_headers_are_keyed_by_tenant_and_listed_through_the_index(aws):
    aws.container.traces.put_header("demo", header("c", "2026-11-29T20:00:00.000Z"))
    item = aws.client("dynamodb").get_item(
        TableName=aws.settings.replay_table,
        Key={"pk": {"S": "demo"}, "sk": {"S": "TRACE#sha256:" + "c" * 64}})["Item"]
    assert item["gsi1pk"]["S"] == "demo#TRACES#coder"
    assert item["gsi1sk"]["S"] == "2026-11-29T20:00:00.000Z#sha256:" + "c" * 64


def test_listing_pages_newest_first_without_crossing_tenants_or_deployments(aws):
    store = aws.container.traces
    expected = []
    for i, ch in enumerate("0123456"):
        h = header(ch, f"2026-11-29T20:00:0{i}.000Z")
        store.put_header("demo", h)
        expected.insert(0, h["digest"])
    store.put_header("demo", header("e", "2026-11-29T21:00:00.000Z", deployment="else"))
    store.put_header("other", header("f", "2026-11-29T21:00:00.000Z"))
    seen, token, pages = [], None, 0
    while True:
        page = store.list_headers("demo", "coder", 3, token)
        pages += 1
        seen += [h["digest"] for h in page.headers]
        token = page.next_token
        if token is None:
            break
    assert seen == expected
    assert pages == 3


@pytest.mark.parametrize("token", ["not-base64!", "eyJ4IjogMX0", "e30"])
def test_a_forged_next_token_is_refused(aws, token):
    with pytest.raises(InvalidInput) as info:
        aws.container.traces.list_headers("demo", "coder", 3, token)
    assert info.value.field == "next_token"


def test_documents_round_trip_and_presigned_urls_fetch_them(aws):
    documents = aws.container.documents
    assert isinstance(documents, S3DocumentStore)
    documents.put_json("traces/demo/x.json", {"a": 1})
    assert documents.get_json("traces/demo/x.json") == {"a": 1}
    url = documents.presigned_url("traces/demo/x.json")
    assert requests.get(url, timeout=10).json() == {"a": 1}


def test_a_missing_document_is_not_found(aws):
    with pytest.raises(NotFound):
        aws.container.documents.get_bytes("traces/demo/missing.json")


def test_trace_store_is_a_dynamo_adapter(aws):
    assert isinstance(aws.container.traces, DynamoTraceStore)


def test_digest_prefixes_resolve_within_one_tenant_only(aws):
    store = aws.container.traces
    store.put_header("demo", header("7", "2026-11-29T20:00:00.000Z"))
    store.put_header("demo", {**header("7", "2026-11-29T20:00:01.000Z"),
                              "digest": "sha256:" + "7" * 10 + "8" * 54})
    store.put_header("other", header("9", "2026-11-29T20:00:00.000Z"))
    assert store.find_by_prefix("demo", "sha256:" + "7" * 12, limit=2) == [
        "sha256:" + "7" * 64]
    assert len(store.find_by_prefix("demo", "sha256:" + "7" * 8, limit=2)) == 2
    assert store.find_by_prefix("demo", "sha256:999999", limit=2) == []
    assert store.find_by_prefix("other", "sha256:999999", limit=2) == [
        "sha256:" + "9" * 64]
