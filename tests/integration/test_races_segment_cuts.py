"""Segment cuts racing re-sends and other deletions (third review, issue 27): every kept row stays
readable, and no bytes are left that no live index item names (SQL over the bucket reads them)."""

from __future__ import annotations

import pytest

from infercrane.adapters.segments.layout import Segment
from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.errors import DependencyUnavailable
from tests.integration.test_races_observations import BASE_MS, new_store, obs, versions, visible
from tests.support.faults import Crash

END = 10**13 - 1


def named_versions(aws, deployment: str) -> set[str | None]:
    return {seg.version_id for seg in new_store(aws).segments(
        "demo", deployment, 0, END, expired=True, retired=True)}


def survivor_with_gone_version(aws, deployment: str) -> Segment:
    """Rows 0, 10, 20 in one segment and 10, 20 again in another, whose version is then deleted
    (its index item still names it): the segment a cut keeping 10 and 20 makes again."""
    new_store(aws).put_many([obs(n, deployment, True) for n in (0, 10, 20)])
    new_store(aws).put_many([obs(n, deployment, True) for n in (10, 20)])
    alone = next(seg for seg in new_store(aws).segments("demo", deployment, 0, END)
                 if seg.rows == 2)
    aws.client("s3").delete_object(Bucket=aws.settings.documents_bucket, Key=alone.key,
                                   VersionId=alone.version_id)
    return alone


def test_two_deletions_making_a_cut_whose_survivor_names_a_gone_version_keep_the_rows(aws):
    # The kept rows (b, c) are also a segment whose version is gone. D_a creates them again
    # under that key; D_b adopts that version and wins the claim (the survivor's item there):
    # the item must be repaired to the adopted version, or D_a, losing, deletes it as unnamed.
    survivor_with_gone_version(aws, "adopted")
    d_b = new_store(aws)

    class Da(SegmentObservationStore):
        ran = False

        def _retire(self, old, new):  # type: ignore[no-untyped-def]
            if not Da.ran:
                Da.ran = True
                d_b.delete("demo", "adopted", BASE_MS + 5)
            return super()._retire(old, new)

    new_store(aws, cls=Da).delete("demo", "adopted", BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, "adopted")] == ["o-000010", "o-000020"]
    assert versions(aws, "adopted") == named_versions(aws, "adopted")


def test_a_resend_whose_adopted_version_goes_with_a_cut_leaves_no_unnamed_bytes(aws):
    # The re-send adopts the stored version and its item names it; then a cut retires that item
    # and deletes the version (killed before deleting the item: day marker, kept rows' object,
    # transaction, old object). The re-send writes the rows again and meets the retired item:
    # it answers 503, and the bytes it wrote must not stay (no item will ever name them).
    batch = [obs(n, "retired", True) for n in (0, 10, 20)]
    new_store(aws).put_many(batch)

    class Resend(SegmentObservationStore):
        ran = False

        def _put_index(self, seg):  # type: ignore[no-untyped-def]
            new = super()._put_index(seg)
            if not Resend.ran:
                Resend.ran = True
                with pytest.raises(Crash):
                    new_store(aws, crash_after=4).delete("demo", "retired", BASE_MS + 5)
            return new

    with pytest.raises(DependencyUnavailable):
        new_store(aws, cls=Resend).put_many(batch)
    new_store(aws).delete("demo", "retired", BASE_MS + 5)  # the deletion's re-run
    assert visible(aws, "retired") == batch[1:]
    assert versions(aws, "retired") == named_versions(aws, "retired")


def test_a_cut_meeting_its_survivors_item_retired_leaves_no_unnamed_bytes(aws):
    # The kept rows (b, c) are also a segment that another deletion has retired and whose
    # version it deleted (killed before its item). The cut writes the rows again under that
    # key and cannot name them (a retired item is never repaired): it answers 503, and the
    # bytes it wrote must not stay.
    alone = survivor_with_gone_version(aws, "survivor")
    aws.client("dynamodb").update_item(
        TableName=aws.settings.observations_table,
        Key={"pk": {"S": alone.pk}, "sk": {"S": alone.sk}}, UpdateExpression="SET retired = :t",
        ExpressionAttributeValues={":t": {"BOOL": True}})
    with pytest.raises(DependencyUnavailable):
        new_store(aws).delete("demo", "survivor", BASE_MS + 5)
    assert versions(aws, "survivor") - named_versions(aws, "survivor") == set()


def test_a_cut_of_a_segment_a_resend_renamed_after_the_page_leaves_only_the_kept_rows(aws):
    # A whole deletion killed after deleting the version V1 (its item still names it); a cut's
    # page names V1; before the cut reads it, a re-send writes V2 and repairs the item to it.
    # The cut must not retire the item on V1's name (then delete V1 only, fail its V1-conditional
    # item delete and answer): a retired item and V2's bytes, the deleted row in them, would stay.
    batch = [obs(n, "renamed", True) for n in (0, 10, 20)]
    new_store(aws).put_many(batch)
    with pytest.raises(Crash):
        new_store(aws, crash_after=1).delete("demo", "renamed")
    resender = new_store(aws)

    class D(SegmentObservationStore):
        ran = False

        def fetch(self, seg):  # type: ignore[no-untyped-def]
            if not D.ran:
                D.ran = True
                assert resender.put_many(batch).skipped == 3
            return super().fetch(seg)

    new_store(aws, cls=D).delete("demo", "renamed", BASE_MS + 5)
    assert visible(aws, "renamed") == batch[1:]
    left = list(new_store(aws).segments("demo", "renamed", 0, END, expired=True, retired=True))
    assert [(seg.rows, seg.retired) for seg in left] == [(2, False)]
    assert versions(aws, "renamed") == named_versions(aws, "renamed")
