"""Segments under concurrency and crashes, against moto's server.

Invariants: of concurrent identical batches exactly one counts its rows `stored` and one segment
(one object, one index item) exists; a process killed between any two writes of a batch (day
marker, object, index item) is completed by a re-send; a deletion killed between any two of its
writes never leaves a deleted row visible once a re-run answers, nor loses a kept row."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import HOUR_MS
from infercrane.errors import DependencyUnavailable
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


def new_store(aws, crash_after: int | None = None,
              cls: type[SegmentObservationStore] = SegmentObservationStore
              ) -> SegmentObservationStore:
    """A store on the stack's bucket and table; `cls`: a subclass a race test steers."""
    s = aws.settings
    store = cls(aws.client("s3"), aws.client("dynamodb"), s.documents_bucket,
                s.observations_table, 30, parallel=1)
    if crash_after is not None:
        store.fault_after_write = fault_after(crash_after)
    return store


def objects(aws, deployment: str) -> list[str]:
    listed = aws.client("s3").list_objects_v2(
        Bucket=aws.settings.documents_bucket,
        Prefix=f"observations/tenant=demo/deployment={deployment}/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


def visible(aws, deployment: str) -> list[StoredObservation]:
    return list(new_store(aws).query("demo", deployment, 0, 10**13 - 1))


@pytest.mark.parametrize("named", [False, True], ids=["unnamed", "named"])
def test_concurrent_identical_batches_store_once_and_count_once(aws, named):
    batch = [obs(n, "race", named) for n in range(500)]
    stores = [new_store(aws) for _ in range(10)]
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda s: s.put_many(batch), stores))
    assert sum(r.items for r in results) == 500
    assert all(r.items + r.skipped == 500 and not r.refused for r in results)
    assert len(objects(aws, "race")) == 1
    assert len(list(new_store(aws).segments("demo", "race", 0, 10**13 - 1))) == 1
    assert visible(aws, "race") == batch


def writes_of_a_clean_run(aws, batch: list[StoredObservation]) -> int:
    store = new_store(aws)
    count = 0

    def tick() -> None:
        nonlocal count
        count += 1

    store.fault_after_write = tick
    store.put_many([replace(o, deployment="count") for o in batch])
    return count


def test_a_batch_killed_after_any_write_is_completed_by_a_resend(aws):
    # Two hours: day marker, then per segment object and index item.
    batch = [obs(n, "x", True) for n in range(60)] + [
        obs(n, "x", False, arrival_ms=BASE_MS + HOUR_MS + n) for n in range(60, 100)]
    boundaries = writes_of_a_clean_run(aws, batch)
    assert boundaries == 5
    for k in range(1, boundaries):
        deployment = f"crash-{k}"
        mine = [replace(o, deployment=deployment) for o in batch]
        with pytest.raises(Crash):
            new_store(aws, crash_after=k).put_many(mine)
        half = visible(aws, deployment)
        assert len(half) in (0, 60)  # a segment is visible whole or not at all
        again = new_store(aws).put_many(mine)
        assert again.refused == {}
        assert again.items == len(mine) - len(half)
        assert visible(aws, deployment) == mine
        assert len(objects(aws, deployment)) == 2


def test_a_deletion_killed_between_its_writes_converges_when_run_again(aws):
    # Three segments: one wholly before the cut, one straddling it, one after.
    batch = [obs(n, "gone", True, arrival_ms=BASE_MS + n * HOUR_MS // 40) for n in range(120)]
    cut = BASE_MS + HOUR_MS + HOUR_MS // 2
    kept = [o for o in batch if o.arrival_ms >= cut]
    clean = new_store(aws)
    clean.put_many([replace(o, deployment="count") for o in batch])
    steps = 0

    def tick() -> None:
        nonlocal steps
        steps += 1

    clean.fault_after_write = tick
    clean.delete("demo", "count", before_ms=cut)
    # whole: object, index; straddling: new object, transaction (old retired + new index), old
    # object, old index
    assert steps == 6
    for k in range(1, steps):
        deployment = f"gone-{k}"
        mine = [replace(o, deployment=deployment) for o in batch]
        new_store(aws).put_many(mine)
        with pytest.raises(Crash):
            new_store(aws, crash_after=k).delete("demo", deployment, before_ms=cut)
        # Whatever the crash point, no kept row is lost.
        assert {o.observation_id for o in kept} <= {
            o.observation_id for o in visible(aws, deployment)}
        new_store(aws).delete("demo", deployment, before_ms=cut)
        assert visible(aws, deployment) == [replace(o, deployment=deployment) for o in kept]
        assert len(objects(aws, deployment)) == 2


def test_two_deletions_cutting_one_segment_at_once_leave_no_deleted_row(aws):
    # One segment a@0, b@10, c@20. D1 (before 5) reads it; D2 (before 15) runs whole in between;
    # then D1 rewrites what it read. Whoever replaces the segment second must see the first's cut.
    new_store(aws).put_many([obs(0, "two", True), obs(10, "two", True), obs(20, "two", True)])
    d2 = new_store(aws)

    class D1(SegmentObservationStore):
        ran = False

        def fetch(self, seg):  # type: ignore[no-untyped-def]
            body = super().fetch(seg)
            if not D1.ran:
                D1.ran = True
                assert d2.delete("demo", "two", BASE_MS + 15) == 2
            return body

    d1 = new_store(aws, cls=D1)
    d1.delete("demo", "two", BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, "two")] == ["o-000020"]
    assert len(objects(aws, "two")) == 1  # the loser's object of kept rows is gone too


def test_a_replace_and_a_deletion_cutting_one_segment_at_once_keep_only_what_both_keep(aws):
    # An import's rows (i-) and captured rows (o-) in one segment: --replace deletes the i- rows
    # while a DELETE ?before cuts the first half.
    rows = [obs(n, "mix", True, observation_id=f"{'i' if n % 2 else 'o'}-{n:06d}")
            for n in range(20)]
    new_store(aws).put_many(rows)
    deleter = new_store(aws)

    class Replace(SegmentObservationStore):
        ran = False

        def fetch(self, seg):  # type: ignore[no-untyped-def]
            body = super().fetch(seg)
            if not Replace.ran:
                Replace.ran = True
                deleter.delete("demo", "mix", BASE_MS + 10)
            return body

    new_store(aws, cls=Replace).delete_import("demo", "mix", BASE_MS, BASE_MS + 20, "i-")
    assert [o.observation_id for o in visible(aws, "mix")] == [
        f"o-{n:06d}" for n in range(10, 20, 2)]


def test_a_resend_after_a_deletion_killed_mid_segment_is_deleted_by_its_rerun(aws):
    # Versioned bucket (as deployed): killed after the object version's delete, before its index
    # item; a re-send writes a new version under the same key. The index item must name it, or
    # the re-run deletes the old version only and the re-sent bytes stay (SQL reads them).
    batch = [obs(n, "vers", True) for n in range(3)]
    new_store(aws).put_many(batch)
    with pytest.raises(Crash):
        new_store(aws, crash_after=1).delete("demo", "vers")
    again = new_store(aws).put_many(batch)
    assert (again.items, again.skipped) == (0, 3)  # the index item was there: already present
    assert visible(aws, "vers") == batch
    new_store(aws).delete("demo", "vers")
    listed = aws.client("s3").list_object_versions(
        Bucket=aws.settings.documents_bucket, Prefix="observations/tenant=demo/deployment=vers/")
    assert listed.get("Versions", []) == []
    assert visible(aws, "vers") == []


@pytest.mark.parametrize(("k", "left"), [(1, 1), (2, 2), (3, 1)])
def test_the_losing_deletion_killed_after_any_write_leaves_no_deleted_row_to_traces(aws, k, left):
    # As above, the loser killed after its writes: the day marker (1), its kept rows' object (2),
    # deleting that object again once its claim failed (3).
    deployment = f"lost-{k}"
    new_store(aws).put_many([obs(n, deployment, True) for n in (0, 10, 20)])
    d2 = new_store(aws)

    class D1(SegmentObservationStore):
        ran = False

        def fetch(self, seg):  # type: ignore[no-untyped-def]
            body = super().fetch(seg)
            if not D1.ran:
                D1.ran = True
                d2.delete("demo", deployment, BASE_MS + 15)
            return body

    d1 = new_store(aws, cls=D1)
    d1.fault_after_write = fault_after(k)
    with pytest.raises(Crash):
        d1.delete("demo", deployment, BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, deployment)] == ["o-000020"]
    new_store(aws).delete("demo", deployment, BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, deployment)] == ["o-000020"]
    # Killed before deleting it, the loser's object stays, unnamed: invisible to traces, seen
    # by SQL until the lifecycle rule expires it (docs/capture.md, Deletion).
    assert len(objects(aws, deployment)) == left


def test_two_deletions_making_the_same_cut_keep_the_kept_rows(aws):
    # Both stage the same kept rows (one key): D_a creates the object, D_b adopts it (412) and
    # wins the claim; D_a loses and must not delete the object the survivor's item names.
    new_store(aws).put_many([obs(n, "same", True) for n in (0, 10, 20)])
    d_b = new_store(aws)

    class Da(SegmentObservationStore):
        ran = False

        def _retire(self, old, new):  # type: ignore[no-untyped-def]
            if not Da.ran:
                Da.ran = True
                assert d_b.delete("demo", "same", BASE_MS + 5) == 1
            return super()._retire(old, new)

    new_store(aws, cls=Da).delete("demo", "same", BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, "same")] == ["o-000010", "o-000020"]
    assert len(objects(aws, "same")) == 1


def versions(aws, deployment: str) -> set[str]:
    listed = aws.client("s3").list_object_versions(
        Bucket=aws.settings.documents_bucket,
        Prefix=f"observations/tenant=demo/deployment={deployment}/")
    return {v["VersionId"] for v in listed.get("Versions", [])}


def test_a_resend_meeting_a_segment_being_deleted_is_refused_until_the_deletion_is_done(aws):
    # The deletion has deleted the old object's version, not yet its (retired) index item; the
    # re-send of the old rows writes a new version there. Repairing the retired item to it would
    # leave bytes no item names once the deletion removes the item (SQL would read them).
    batch = [obs(n, "resend", True) for n in (0, 10, 20)]
    new_store(aws).put_many(batch)
    resender = new_store(aws)
    refused: list[Exception] = []

    class D(SegmentObservationStore):
        def _delete_object(self, seg):  # type: ignore[no-untyped-def]
            super()._delete_object(seg)
            if seg.retired or not refused:
                with pytest.raises(DependencyUnavailable) as caught:
                    resender.put_many(batch)
                refused.append(caught.value)

    new_store(aws, cls=D).delete("demo", "resend", BASE_MS + 5)
    assert refused
    named = {seg.version_id for seg in new_store(aws).segments(
        "demo", "resend", 0, 10**13 - 1, expired=True, retired=True)}
    assert versions(aws, "resend") - named == set()  # no bytes left that no item names
    again = new_store(aws).put_many(batch)  # after the deletion: stored again
    assert (again.items, again.skipped) == (3, 0)
    assert visible(aws, "resend") == batch


def test_a_deletion_killed_after_its_claim_shows_no_deleted_row(aws):
    # Killed after the transaction (day marker, kept rows' object, transaction): the retired
    # item and its object are still there, but reads skip retired items.
    batch = [obs(n, "claim", True) for n in (0, 10, 20)]
    new_store(aws).put_many(batch)
    with pytest.raises(Crash):
        new_store(aws, crash_after=3).delete("demo", "claim", BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, "claim")] == ["o-000010", "o-000020"]
    assert visible(aws, "claim") == batch[1:]


def test_a_resend_racing_a_whole_segment_delete_names_bytes_that_exist(aws):
    # The re-send adopts the stored version (412); the deletion removes that version and its
    # item; the re-send then indexes the version it adopted. Its answer `stored` must be true.
    batch = [obs(n, "adopt", True) for n in range(3)]
    new_store(aws).put_many(batch)
    deleter = new_store(aws)

    class Resend(SegmentObservationStore):
        ran = False

        def _put_index(self, seg):  # type: ignore[no-untyped-def]
            if not Resend.ran:
                Resend.ran = True
                assert deleter.delete("demo", "adopt") == 3
            return super()._put_index(seg)

    again = new_store(aws, cls=Resend).put_many(batch)
    assert again.items == 3
    assert visible(aws, "adopt") == batch
    named = {seg.version_id for seg in new_store(aws).segments("demo", "adopt", 0, 10**13 - 1)}
    assert versions(aws, "adopt") == named


def test_a_cut_whose_kept_rows_are_already_indexed_names_the_bytes_it_wrote(aws):
    # The kept rows (b, c) are also a segment of their own whose version is gone (a deletion
    # killed between its version and its index item): the cut writes them again under the same
    # key; the item there must name those bytes, or deleting it later leaves them behind.
    new_store(aws).put_many([obs(0, "kept", True), obs(10, "kept", True), obs(20, "kept", True)])
    new_store(aws).put_many([obs(10, "kept", True), obs(20, "kept", True)])
    alone = next(seg for seg in new_store(aws).segments("demo", "kept", 0, 10**13 - 1)
                 if seg.rows == 2)
    aws.client("s3").delete_object(Bucket=aws.settings.documents_bucket, Key=alone.key,
                                   VersionId=alone.version_id)
    new_store(aws).delete("demo", "kept", BASE_MS + 5)
    named = {seg.version_id for seg in new_store(aws).segments("demo", "kept", 0, 10**13 - 1)}
    assert versions(aws, "kept") == named
    new_store(aws).delete("demo", "kept")
    assert versions(aws, "kept") == set()


def test_a_resend_between_a_whole_deletes_version_and_its_item_leaves_no_bytes(aws):
    # The deletion has deleted the (live) segment's version; a re-send writes a new version and
    # repairs the item to it; the deletion's item delete (conditional on the version it deleted)
    # fails, and its walk goes back and deletes the new version with the item.
    batch = [obs(n, "whole", True) for n in range(3)]
    new_store(aws).put_many(batch)
    resender = new_store(aws)

    class D(SegmentObservationStore):
        ran = False

        def _delete_object(self, seg):  # type: ignore[no-untyped-def]
            super()._delete_object(seg)
            if not D.ran:
                D.ran = True
                assert resender.put_many(batch).skipped == 3

    new_store(aws, cls=D).delete("demo", "whole")
    assert versions(aws, "whole") == set()
    assert visible(aws, "whole") == []


def test_a_resend_killed_before_checking_the_version_it_adopted_is_completed_by_a_resend(aws):
    # As above, killed after its index item (day marker, index item) and before the HEAD: the
    # item names a deleted version; the next re-send writes the rows again and repairs it.
    batch = [obs(n, "adopt2", True) for n in range(3)]
    new_store(aws).put_many(batch)
    deleter = new_store(aws)

    class Resend(SegmentObservationStore):
        ran = False

        def _put_index(self, seg):  # type: ignore[no-untyped-def]
            if not Resend.ran:
                Resend.ran = True
                deleter.delete("demo", "adopt2")
            return super()._put_index(seg)

    killed = new_store(aws, cls=Resend)
    killed.fault_after_write = fault_after(2)
    with pytest.raises(Crash):
        killed.put_many(batch)
    new_store(aws).put_many(batch)
    assert visible(aws, "adopt2") == batch
    named = {seg.version_id for seg in new_store(aws).segments("demo", "adopt2", 0, 10**13 - 1)}
    assert versions(aws, "adopt2") == named
