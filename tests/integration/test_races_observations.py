"""Observations and their id claims under concurrency and crashes, against moto's server.

Invariants: an observation_id names at most one observation, and every named observation has its
claim; concurrent requests' `stored` add up to what is in the table; after a crash at any write,
re-sending the original batch converges to every item stored once and other content under the
same ids is an `id_conflict`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from infercrane.adapters.dynamo.observations import CLAIM, DynamoObservationStore, partition
from infercrane.domain.observation import ID_CONFLICT, StoredObservation
from tests.support.faults import Crash
from tests.support.faults import crash_after as fault_after

BASE_MS = 1_764_446_400_000
INGEST_MS = 1_764_450_000_123


def obs(n: int, deployment: str, named: bool, **over: Any) -> StoredObservation:
    fields: dict[str, Any] = {
        "tenant": "demo", "deployment": deployment,
        "observation_id": f"o-{n:06d}" if named else f"h-{n:032x}",
        "arrival_ms": BASE_MS + n, "input_tokens": 100 + n, "output_tokens": 10,
        "latency_ms": 250.5, "outcome": "ok", "streaming": True, "sampling_rate": 1.0,
        "source": "captured", "ingested_at_ms": INGEST_MS,
        "fingerprint": f"{n:064x}" if named else None}
    fields.update(over)
    return StoredObservation(**fields)


def other_content(o: StoredObservation) -> StoredObservation:
    """The same id, another observation (another arrival, so another item key)."""
    return replace(o, arrival_ms=o.arrival_ms + 7, output_tokens=99,
                   fingerprint=f"{int(o.fingerprint or '0', 16) + 10**6:064x}")


def new_store(aws, crash_after: int | None = None) -> DynamoObservationStore:
    store = DynamoObservationStore(aws.settings.observations_table, aws.container.dynamo,
                                   retention_days=30, sleep=lambda s: None, parallel=1)
    if crash_after is not None:
        store.fault_after_write = fault_after(crash_after)
    return store


def items(aws, deployment: str) -> list[dict[str, Any]]:
    client = aws.client("dynamodb")
    pages = client.get_paginator("query").paginate(
        TableName=aws.settings.observations_table, ConsistentRead=True,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": partition("demo", deployment)}})
    return [i for page in pages for i in page["Items"]]


def check_ids(aws, deployment: str) -> dict[str, str]:
    """Each id names at most one observation, and a named observation has its claim with its
    fingerprint; returns id -> fingerprint of the stored observations."""
    stored = items(aws, deployment)
    claims = {i["sk"]["S"][len(CLAIM):]: i["fingerprint"]["S"] for i in stored
              if i["sk"]["S"].startswith(CLAIM)}
    observations = [i for i in stored if not i["sk"]["S"].startswith(CLAIM)]
    ids = [i["observation_id"]["S"] for i in observations]
    assert len(ids) == len(set(ids)), "an id names two observations"
    named = {i["observation_id"]["S"]: i["fingerprint"]["S"] for i in observations
             if "fingerprint" in i}
    for oid, fp in named.items():
        assert claims.get(oid) == fp, "an observation without its claim"
    return {oid: named.get(oid, "") for oid in ids}


# The case (ten identical 500-item batches) without ids; with ids (twice the writes) 200.
@pytest.mark.parametrize(("named", "size"), [(False, 500), (True, 200)], ids=["unnamed", "named"])
def test_concurrent_identical_batches_add_up_to_what_is_stored(aws, named, size):
    batch = [obs(n, "race", named) for n in range(size)]
    stores = [new_store(aws) for _ in range(10)]
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda s: s.put_many(batch), stores))
    assert sum(r.items for r in results) == size
    assert all(r.items + r.skipped == size and not r.refused for r in results)
    assert len(check_ids(aws, "race")) == size


def test_concurrent_first_writes_of_one_id_with_other_content_store_exactly_one(aws):
    first = [obs(n, "race", True) for n in range(100)]
    second = [other_content(o) for o in first]
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda batch: new_store(aws).put_many(batch), [first, second])
    assert a.items + b.items == 100
    assert len(a.refused) + len(b.refused) == 100
    assert set(a.refused.values()) | set(b.refused.values()) == {ID_CONFLICT}
    assert len(check_ids(aws, "race")) == 100


def writes_of_a_clean_run(aws, batch: list[StoredObservation]) -> int:
    return new_store(aws).put_many([replace(o, deployment="count") for o in batch]).requests


def test_a_batch_killed_after_any_write_is_repaired_by_a_resend_and_keeps_its_ids(aws):
    batch = [obs(n, "x", True) for n in range(120)] + [obs(n, "x", False) for n in range(120, 200)]
    boundaries = writes_of_a_clean_run(aws, batch)
    assert boundaries == 4  # 320 actions: 100 per transaction
    for k in range(1, boundaries):
        deployment = f"crash-{k}"
        mine = [replace(o, deployment=deployment) for o in batch]
        with pytest.raises(Crash):
            new_store(aws, crash_after=k).put_many(mine)
        half = check_ids(aws, deployment)
        assert 0 < len(half) < len(mine)
        # Other content under the ids already stored is refused, never stored beside them.
        taken = [o for o in mine if o.observation_id in half and o.fingerprint]
        clash = new_store(aws).put_many([other_content(o) for o in taken])
        assert (clash.items, set(clash.refused.values())) == (0, {ID_CONFLICT})
        # Re-sending the original completes it: everything once, nothing refused.
        again = new_store(aws).put_many(mine)
        assert again.refused == {}
        assert again.items == len(mine) - len(half)
        assert len(check_ids(aws, deployment)) == len(mine)


def test_observations_stored_without_claims_get_them_back_from_a_resend(aws):
    # What the old write order could leave: observations written, their claims lost.
    batch = [obs(n, "legacy", True) for n in range(30)]
    store = new_store(aws)
    client = aws.client("dynamodb")
    for o in batch:
        client.put_item(TableName=aws.settings.observations_table, Item=store._attributes(o))
    with pytest.raises(AssertionError, match="without its claim"):
        check_ids(aws, "legacy")
    again = store.put_many(batch)
    assert (again.items, again.skipped, again.refused) == (0, 30, {})
    assert len(check_ids(aws, "legacy")) == 30
    clash = store.put_many([other_content(o) for o in batch])
    assert (clash.items, set(clash.refused.values())) == (0, {ID_CONFLICT})


def test_a_deletion_killed_between_its_writes_never_leaves_an_observation_without_its_claim(aws):
    batch = [obs(n, "gone", True) for n in range(60)]
    new_store(aws).put_many(batch)
    with pytest.raises(Crash):
        new_store(aws, crash_after=1).delete("demo", "gone")
    check_ids(aws, "gone")
    assert new_store(aws).delete("demo", "gone") < 60
    assert items(aws, "gone") == []
    assert new_store(aws).put_many([other_content(o) for o in batch]).items == 60
