"""The one-item-per-observation DynamoDB store (kept to read legacy items for the migration, and
to write the tables the migration tests start from) against moto: batching, retries,
idempotence, TTL, Query only."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from pynamodb.exceptions import CancellationReason, TransactWriteError, VerboseClientError

from infercrane.adapters.dynamo.observations import DynamoObservationStore
from infercrane.domain.observation import StoredObservation

BASE_MS = 1_764_446_400_000
INGEST_MS = 1_764_450_000_123


def obs(n: int, *, arrival: int | None = None, deployment: str = "coder", tenant: str = "demo",
        **over: Any) -> StoredObservation:
    fields: dict[str, Any] = {
        "tenant": tenant, "deployment": deployment, "observation_id": f"o-{n:06d}",
        "arrival_ms": BASE_MS + n if arrival is None else arrival, "input_tokens": 100 + n,
        "output_tokens": 10, "latency_ms": 250.5, "outcome": "ok", "streaming": True, "sampling_rate": 1.0,
        "source": "captured", "ingested_at_ms": INGEST_MS}
    fields.update(over)
    return StoredObservation(**fields)


@pytest.fixture
def store(aws) -> DynamoObservationStore:
    return DynamoObservationStore(aws.settings.observations_table, aws.container.dynamo,
                                  retention_days=aws.settings.retention_days, sleep=lambda s: None)


def record_operations(store: DynamoObservationStore) -> list[str]:
    seen: list[str] = []
    for model in (store._read, store._write):
        client = model._get_connection().connection.client
        client.meta.events.register("before-call.dynamodb.*",
                                    lambda model, **kw: seen.append(model.name))
    return seen


def test_thousand_observations_take_exactly_ten_conditional_write_requests(store):
    stats = store.put_many([obs(n) for n in range(1000)])
    assert (stats.items, stats.requests, stats.retries) == (1000, 10, 0)  # 100 a transaction
    assert stats.read_requests == 10  # the idempotence check: 100 keys a BatchGetItem


def test_rewriting_stored_observations_writes_nothing(store):
    store.put_many([obs(n) for n in range(60)])
    again = store.put_many([obs(n, ingested_at_ms=INGEST_MS + 999) for n in range(60)] + [obs(60)])
    assert (again.items, again.requests, again.skipped) == (1, 1, 60)
    kept = list(store.query("demo", "coder", BASE_MS, BASE_MS + 100))
    assert len(kept) == 61
    assert all(o.ingested_at_ms == INGEST_MS for o in kept)


def test_window_read_is_one_paginated_query_in_arrival_then_id_order(store):
    written = [obs(3, arrival=BASE_MS + 5), obs(1, arrival=BASE_MS + 5), obs(2, arrival=BASE_MS),
               obs(4, arrival=BASE_MS + 10), obs(5, deployment="other"), obs(6, tenant="other")]
    store.put_many(written)
    ops = record_operations(store)
    got = list(store.query("demo", "coder", BASE_MS, BASE_MS + 10, page_size=1))
    assert [o.observation_id for o in got] == ["o-000002", "o-000001", "o-000003"]
    assert got[0] == written[2]
    assert set(ops) == {"Query"}
    assert len(ops) >= 3
    assert [o.observation_id for o in store.query("demo", "coder", BASE_MS, BASE_MS + 11,
                                                  limit=2)] == ["o-000002", "o-000001"]


def test_every_field_round_trips(store):
    full = obs(1, revision="r7", cached_input_tokens=64, ttft_ms=12.25, provenance="azure-csv:sha256:ab",
               timing_source="modeled", timing_model='{"name":"linear-v1"}', session_id="v2:" + "a" * 64,
               parent_session_id="v2:" + "b" * 64, shared_prefix_id="v2:" + "c" * 64,
               prefix_block_ids=("v2:" + "d" * 64, "v2:" + "e" * 64), prefix_block_size=512,
               key_version="v2", source="imported", outcome="timeout", streaming=False,
               sampling_rate=0.25)
    store.put_many([full])
    assert list(store.query("demo", "coder", 0, BASE_MS * 2)) == [full]


def test_ttl_counts_from_ingest_time(aws, store):
    store.put_many([obs(1, arrival=1_000_000_000_000)])  # arrival in 2001: retention ignores it
    raw = aws.client("dynamodb").get_item(
        TableName=aws.settings.observations_table,
        Key={"pk": {"S": "demo#coder"}, "sk": {"S": obs(1, arrival=1_000_000_000_000).sort_key}})
    assert int(raw["Item"]["expires_at"]["N"]) == INGEST_MS // 1000 + 30 * 86_400


def test_delete_takes_a_deployment_optionally_before_a_time(store):
    store.put_many([obs(n) for n in range(30)] + [obs(1, deployment="keep")])
    assert store.delete("demo", "coder", before_ms=BASE_MS + 10) == 10
    assert [o.arrival_ms - BASE_MS for o in store.query("demo", "coder", 0, BASE_MS * 2)][:2] == [10, 11]
    assert store.delete("demo", "coder") == 20
    assert list(store.query("demo", "coder", 0, BASE_MS * 2)) == []
    assert len(list(store.query("demo", "keep", 0, BASE_MS * 2))) == 1


def test_throttled_and_conflicting_transactions_are_retried_and_counted(aws, monkeypatch):
    # One transaction at a time, so the scripted failures hit a known request.
    store = DynamoObservationStore(aws.settings.observations_table, aws.container.dynamo,
                                   retention_days=30, sleep=lambda s: None, parallel=1)
    conn = store._write._get_connection().connection
    real = conn.transact_write_items
    calls: list[int] = []

    def flaky(checks, deletes, puts, updates, **kw):
        calls.append(len(puts))
        if len(calls) == 1:
            raise TransactWriteError("throttled", ClientError(
                {"Error": {"Code": "ThrottlingException"}}, "TransactWriteItems"))
        if len(calls) == 2:  # another transaction held one of its items: cancelled, nothing written
            error = VerboseClientError(
                {"Error": {"Code": "TransactionCanceledException"}}, "TransactWriteItems",
                cancellation_reasons=[CancellationReason("TransactionConflict")]
                + [None] * (len(puts) - 1))
            raise TransactWriteError("cancelled", error)
        return real(checks, deletes, puts, updates, **kw)

    monkeypatch.setattr(conn, "transact_write_items", flaky)
    stats = store.put_many([obs(n) for n in range(130)])
    assert calls == [100, 30, 100, 30]
    assert (stats.items, stats.requests, stats.retries) == (130, 4, 1)
    assert len(list(store.query("demo", "coder", 0, BASE_MS * 2))) == 130
