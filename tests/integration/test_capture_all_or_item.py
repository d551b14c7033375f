"""Batches are all-or-item and idempotent under key rotation, against moto.

An item the store cannot hold is rejected by index while the rest are stored once; a transient
failure is the only 5xx and a re-send converges; an observation without an id keeps its identity
across an identity-key rotation; an observation_id names one observation.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pynamodb.exceptions import TransactWriteError

from infercrane.adapters.dynamo.observations import DynamoObservationStore
from infercrane.domain.observation import ID_CONFLICT, ITEM_UNSTORABLE, StoredObservation
from infercrane.errors import DependencyUnavailable

BASE_MS = 1_764_446_400_000
INGEST_MS = 1_764_450_000_123
DEPLOYMENT = "coder"


def obs(n: int, **over: Any) -> StoredObservation:
    fields: dict[str, Any] = {
        "tenant": "demo", "deployment": DEPLOYMENT, "observation_id": f"o-{n:06d}",
        "arrival_ms": BASE_MS + n, "input_tokens": 100 + n, "output_tokens": 10,
        "latency_ms": 250.5, "outcome": "ok", "streaming": True, "sampling_rate": 1.0,
        "source": "captured", "ingested_at_ms": INGEST_MS}
    fields.update(over)
    return StoredObservation(**fields)


def item(n: int, **over: Any) -> dict[str, Any]:
    arrival = datetime.fromtimestamp((BASE_MS + n * 1000) / 1000, UTC).isoformat()
    return {"deployment": DEPLOYMENT, "arrival": arrival, "input_tokens": 100 + n,
            "output_tokens": 10, "latency_ms": 250.5, "session_id": f"s-{n % 7}", **over}


@pytest.fixture
def store(aws) -> DynamoObservationStore:
    return DynamoObservationStore(aws.settings.observations_table, aws.container.dynamo,
                                  retention_days=30, sleep=lambda s: None)


def stored(store: DynamoObservationStore, tenant: str = "demo") -> list[StoredObservation]:
    return list(store.query(tenant, DEPLOYMENT, 0, 2**42))


def test_an_oversized_item_is_refused_by_index_and_the_rest_are_stored_once(store):
    batch = [obs(n) for n in range(100)]
    batch[67] = obs(67, timing_model="x" * 450_000)  # over DynamoDB's 400 KB item limit
    first = store.put_many(batch)
    assert dict(first.refused) == {67: ITEM_UNSTORABLE}
    assert first.items == 99
    again = store.put_many(batch)
    assert dict(again.refused) == {67: ITEM_UNSTORABLE}
    assert (again.items, again.skipped) == (0, 99)
    ids = [o.observation_id for o in stored(store)]
    assert len(ids) == len(set(ids)) == 99
    assert "o-000067" not in ids


def test_an_oversized_item_in_a_rest_batch_is_rejected_by_index_in_a_200(aws, store, monkeypatch):
    # The schema bounds every field, so the store's own refusal is reached by growing one built
    # observation past the limit between validation and the write.
    from infercrane.domain import capture as capture_module

    real = capture_module.build

    def build(batch, index, raw):
        built = real(batch, index, raw)
        return replace(built, provenance="p" * 450_000) if index == 61 else built

    monkeypatch.setattr(capture_module, "build", build)
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    items = [item(n, observation_id=f"gw-{n}") for n in range(100)]
    result = aws.container.capture.ingest("demo", items)
    assert (result.accepted, result.rejected) == (99, 1)
    assert [(e.index, e.code) for e in result.errors] == [(61, ITEM_UNSTORABLE)]
    assert len(stored(store)) == 99
    assert "p" * 100 not in str(result.to_json())


def test_a_resend_after_a_transient_failure_converges_to_every_item_stored_once(aws, store,
                                                                               monkeypatch):
    conn = store._write._get_connection().connection
    real = conn.transact_write_items
    outage = {"on": True}

    def flaky(checks, deletes, puts, updates, **kw):
        # The transaction holding item 70 meets a store that keeps failing; the others go through.
        if outage["on"] and any(p["Item"]["sk"]["S"].endswith("#o-000070") for p in puts):
            raise TransactWriteError("down", ClientError(
                {"Error": {"Code": "InternalServerError"}}, "TransactWriteItems"))
        return real(checks, deletes, puts, updates, **kw)

    monkeypatch.setattr(conn, "transact_write_items", flaky)
    batch = [obs(n, fingerprint=f"{n:064x}") for n in range(100)]
    with pytest.raises(DependencyUnavailable):
        store.put_many(batch)
    assert 0 < len(stored(store)) < 100
    outage["on"] = False
    again = store.put_many(batch)
    assert again.refused == {}
    ids = [o.observation_id for o in stored(store)]
    assert len(ids) == len(set(ids)) == 100
    assert store.put_many(batch).items == 0


def test_identity_of_items_without_an_id_survives_an_identity_key_rotation(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    items = [item(n) for n in range(100)]
    assert aws.container.capture.ingest("demo", items).accepted == 100
    assert aws.container.tenancy.rotate_hmac_keys("demo", "identity") == "v2"
    again = aws.container.capture.ingest("demo", items)
    assert again.accepted == 100
    assert again.stats.items == 0
    assert len(stored(store)) == 100
    # New data still uses the new key: only its pseudonyms moved, not its identity.
    fresh = aws.container.capture.ingest("demo", [item(500)])
    assert fresh.stats.items == 1
    assert {o.key_version for o in stored(store)} == {"v1", "v2"}


def test_the_same_observation_id_with_other_content_is_rejected_as_a_conflict(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    capture = aws.container.capture
    assert capture.ingest("demo", [item(1, observation_id="gw-1")]).accepted == 1
    later = capture.ingest("demo", [item(2, observation_id="gw-2"),
                                    item(5, observation_id="gw-1"),  # another arrival
                                    item(1, observation_id="gw-1", output_tokens=11)])
    assert [(e.index, e.field, e.code) for e in later.errors] == [
        (1, "observation_id", ID_CONFLICT), (2, "observation_id", ID_CONFLICT)]
    assert later.accepted == 1
    same_batch = capture.ingest("demo", [item(3, observation_id="gw-3"),
                                         item(4, observation_id="gw-3")])
    assert [(e.index, e.code) for e in same_batch.errors] == [(1, ID_CONFLICT)]
    ids = sorted(o.observation_id for o in stored(store))
    assert ids == ["gw-1", "gw-2", "gw-3"]


def test_an_identical_resend_of_a_named_observation_is_no_conflict_even_after_rotation(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    capture = aws.container.capture
    batch = [item(n, observation_id=f"gw-{n}") for n in range(30)]
    assert capture.ingest("demo", batch).accepted == 30
    aws.container.tenancy.rotate_hmac_keys("demo", "identity")
    again = capture.ingest("demo", batch + batch[:3])
    assert (again.accepted, again.rejected, again.stats.items) == (33, 0, 0)
    assert len(stored(store)) == 30


def test_deleting_a_deployment_frees_its_ids(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    capture = aws.container.capture
    capture.ingest("demo", [item(1, observation_id="gw-1"), item(9, observation_id="gw-9")])
    cut = datetime.fromtimestamp((BASE_MS + 5000) / 1000, UTC)
    assert capture.delete("demo", DEPLOYMENT, cut) == 1
    reused = capture.ingest("demo", [item(2, observation_id="gw-1"), item(3, observation_id="gw-9")])
    assert [(e.index, e.code) for e in reused.errors] == [(1, ID_CONFLICT)]
    assert capture.delete("demo", DEPLOYMENT) == 2
    assert capture.ingest("demo", [item(4, observation_id="gw-9")]).rejected == 0


def test_a_thousand_named_observations_cost_twenty_transactions_and_twenty_reads(store):
    # One claim item per client-named observation, read and written with the observations.
    stats = store.put_many([obs(n, fingerprint=f"{n:064x}") for n in range(1000)])
    assert (stats.items, stats.requests, stats.retries, stats.read_requests) == (1000, 20, 0, 20)
    again = store.put_many([obs(n, fingerprint=f"{n:064x}") for n in range(1000)])
    assert (again.items, again.requests, again.read_requests) == (0, 0, 20)
