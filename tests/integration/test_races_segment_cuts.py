"""Segment cuts racing re-sends and other deletions (third review, issue 27): every kept row stays
readable, and no bytes are left that no live index item names (SQL over the bucket reads them)."""

from __future__ import annotations

import pytest

from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.errors import DependencyUnavailable
from tests.integration.test_races_observations import BASE_MS, new_store, obs, versions, visible
from tests.support.faults import Crash
from tests.support.faults import crash_after as fault_after

END = 10**13 - 1


def named_versions(aws, deployment: str) -> set[str | None]:
    return {seg.version_id for seg in new_store(aws).segments(
        "demo", deployment, 0, END, expired=True, retired=True)}


def test_two_deletions_making_a_cut_whose_survivor_names_a_gone_version_keep_the_rows(aws):
    # The kept rows (b, c) are also a segment whose version is gone. D_a creates them again
    # under that key; D_b adopts that version and wins the claim (the survivor's item there):
    # the item must be repaired to the adopted version, or D_a, losing, deletes it as unnamed.
    new_store(aws).put_many([obs(n, "adopted", True) for n in (0, 10, 20)])
    new_store(aws).put_many([obs(n, "adopted", True) for n in (10, 20)])
    alone = next(seg for seg in new_store(aws).segments("demo", "adopted", 0, END)
                 if seg.rows == 2)
    aws.client("s3").delete_object(Bucket=aws.settings.documents_bucket, Key=alone.key,
                                   VersionId=alone.version_id)
    d_b = new_store(aws)

    class Da(SegmentObservationStore):
        ran = False

        def _retire(self, old, new):  # type: ignore[no-untyped-def]
            if not Da.ran:
                Da.ran = True
                d_b.delete("demo", "adopted", BASE_MS + 5)
            return super()._retire(old, new)

    s = aws.settings
    Da(aws.client("s3"), aws.client("dynamodb"), s.documents_bucket, s.observations_table,
       30, parallel=1).delete("demo", "adopted", BASE_MS + 5)
    assert [o.observation_id for o in visible(aws, "adopted")] == ["o-000010", "o-000020"]
    assert versions(aws, "adopted") == named_versions(aws, "adopted")
