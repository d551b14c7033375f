"""Batches are all-or-item and idempotent under key rotation, against moto.

An item the store cannot hold is rejected by index while the rest are stored once; a transient
failure is the only 5xx and a re-send converges; an observation without an id keeps its identity
across an identity-key rotation; an observation_id names one observation (refused within a batch,
deduplicated and counted as a conflict when a window is read across batches).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infercrane.adapters.dynamo.observations import DynamoObservationStore
from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.domain.observation import ID_CONFLICT, ITEM_UNSTORABLE, StoredObservation
from infercrane.domain.observation_rows import HOUR_MS
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
def store(aws) -> SegmentObservationStore:
    return aws.container.observations


@pytest.fixture
def legacy(aws) -> DynamoObservationStore:
    """The one-item-per-observation layout (kept for the migration): its own refusals."""
    return DynamoObservationStore(aws.settings.observations_table, aws.container.dynamo,
                                  retention_days=30, sleep=lambda s: None)


def stored(store: Any, tenant: str = "demo") -> list[StoredObservation]:
    return list(store.query(tenant, DEPLOYMENT, 0, 2**42))


def test_the_legacy_layout_refuses_an_oversized_item_by_index_and_stores_the_rest_once(legacy):
    batch = [obs(n) for n in range(100)]
    batch[67] = obs(67, timing_model="x" * 450_000)  # over DynamoDB's 400 KB item limit
    first = legacy.put_many(batch)
    assert dict(first.refused) == {67: ITEM_UNSTORABLE}
    assert first.items == 99
    again = legacy.put_many(batch)
    assert dict(again.refused) == {67: ITEM_UNSTORABLE}
    assert (again.items, again.skipped) == (0, 99)
    ids = [o.observation_id for o in stored(legacy)]
    assert len(ids) == len(set(ids)) == 99
    assert "o-000067" not in ids


def test_a_resend_after_a_transient_failure_converges_to_every_item_stored_once(aws, store,
                                                                               monkeypatch):
    s3 = aws.client("s3")
    real = s3.put_object
    outage = {"on": True}

    def flaky(**kw):
        # The segment of the second hour meets a store that keeps failing; the others go through.
        if outage["on"] and "/hour=21/" in kw["Key"]:
            raise ClientError({"Error": {"Code": "InternalError"}}, "PutObject")
        return real(**kw)

    monkeypatch.setattr(s3, "put_object", flaky)
    mine = SegmentObservationStore(s3, aws.client("dynamodb"), aws.settings.documents_bucket,
                                   aws.settings.observations_table, 30, parallel=1)
    batch = [obs(n * 1000, arrival_ms=BASE_MS + n * HOUR_MS // 50, fingerprint=f"{n:064x}")
             for n in range(150)]  # three hours
    with pytest.raises(DependencyUnavailable):
        mine.put_many(batch)
    assert 0 < len(stored(store)) < 150
    outage["on"] = False
    again = mine.put_many(batch)
    assert again.refused == {}
    assert again.items == 150 - 50  # the hour stored before the outage is already present
    ids = [o.observation_id for o in stored(store)]
    assert len(ids) == len(set(ids)) == 150
    assert mine.put_many(batch).items == 0


def test_identity_of_items_without_an_id_survives_an_identity_key_rotation(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    items = [item(n) for n in range(100)]
    assert aws.container.capture.ingest("demo", items).accepted == 100
    assert aws.container.tenancy.rotate_hmac_keys("demo", "identity") == "v2"
    again = aws.container.capture.ingest("demo", items)
    assert again.accepted == 100
    assert again.stats.items == 0  # 100 sent twice around a rotation: 100 stored, not 200
    assert len(stored(store)) == 100
    # New data still uses the new key: only its pseudonyms moved, not its identity.
    fresh = aws.container.capture.ingest("demo", [item(500)])
    assert fresh.stats.items == 1
    assert {o.key_version for o in stored(store)} == {"v1", "v2"}


def test_the_same_observation_id_with_other_content_is_a_conflict(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    capture = aws.container.capture
    assert capture.ingest("demo", [item(1, observation_id="gw-1")]).accepted == 1
    later = capture.ingest("demo", [item(2, observation_id="gw-2"),
                                    item(5, observation_id="gw-1"),  # another arrival
                                    item(1, observation_id="gw-1", output_tokens=11)])
    # Within a batch, one write can tell: the later content is refused by index. Across
    # batches it is stored, and a window read keeps the earlier arrival and counts the other.
    assert [(e.index, e.field, e.code) for e in later.errors] == [
        (2, "observation_id", ID_CONFLICT)]
    assert later.accepted == 2
    same_batch = capture.ingest("demo", [item(3, observation_id="gw-3"),
                                         item(4, observation_id="gw-3")])
    assert [(e.index, e.code) for e in same_batch.errors] == [(1, ID_CONFLICT)]
    read = store.query("demo", DEPLOYMENT, 0, 2**42)
    found = [(o.observation_id, o.arrival_ms) for o in read]
    assert found == [("gw-1", BASE_MS + 1000), ("gw-2", BASE_MS + 2000),
                     ("gw-3", BASE_MS + 3000)]
    assert read.counts.conflicts == 1


def test_an_identical_resend_of_a_named_observation_is_no_conflict_even_after_rotation(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    capture = aws.container.capture
    batch = [item(n, observation_id=f"gw-{n}") for n in range(30)]
    assert capture.ingest("demo", batch).accepted == 30
    aws.container.tenancy.rotate_hmac_keys("demo", "identity")
    again = capture.ingest("demo", batch + batch[:3])
    assert (again.accepted, again.rejected, again.stats.items) == (33, 0, 0)
    read = store.query("demo", DEPLOYMENT, 0, 2**42)
    assert len(list(read)) == 30
    assert read.counts.conflicts == 0


def test_deleting_a_deployment_frees_its_ids(aws, store):
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    capture = aws.container.capture
    capture.ingest("demo", [item(1, observation_id="gw-1"), item(9, observation_id="gw-9")])
    cut = datetime.fromtimestamp((BASE_MS + 5000) / 1000, UTC)
    assert capture.delete("demo", DEPLOYMENT, cut) == 1
    reused = capture.ingest("demo", [item(2, observation_id="gw-1"), item(3, observation_id="gw-9")])
    assert reused.errors == []  # gw-9 still names other content: found when read
    read = store.query("demo", DEPLOYMENT, 0, 2**42)
    # At two arrivals, the first in (arrival, stored) order is kept (reading.py says why).
    assert [(o.observation_id, o.arrival_ms) for o in read] == [("gw-1", BASE_MS + 2000),
                                                                ("gw-9", BASE_MS + 3000)]
    assert read.counts.conflicts == 1
    assert capture.delete("demo", DEPLOYMENT) == 3
    assert capture.ingest("demo", [item(4, observation_id="gw-9")]).rejected == 0
    assert [o.arrival_ms for o in stored(store)] == [BASE_MS + 4000]
