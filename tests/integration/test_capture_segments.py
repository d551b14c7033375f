"""The segment store against moto: layout, idempotence, reads that merge and deduplicate, TTL,
deletion that rewrites what it keeps."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from typing import Any

import pytest

from infercrane.adapters.segments.layout import Segment
from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.domain.observation import ID_CONFLICT, StoredObservation
from infercrane.domain.observation_rows import COLUMNS, HOUR_MS

BASE_MS = 1_764_446_400_000  # 2025-11-29T20:00:00Z, an hour's start
INGEST_MS = 1_764_450_000_123


def obs(n: int, *, arrival: int | None = None, deployment: str = "coder", tenant: str = "demo",
        **over: Any) -> StoredObservation:
    fields: dict[str, Any] = {
        "tenant": tenant, "deployment": deployment, "observation_id": f"o-{n:06d}",
        "arrival_ms": BASE_MS + n if arrival is None else arrival, "input_tokens": 100 + n,
        "output_tokens": 10, "latency_ms": 250.5, "outcome": "ok", "streaming": True,
        "sampling_rate": 1.0, "source": "captured", "ingested_at_ms": INGEST_MS,
        "fingerprint": f"{n:064x}"}
    fields.update(over)
    return StoredObservation(**fields)


def new_store(aws, now_ms: int = INGEST_MS, **kw: Any) -> SegmentObservationStore:
    s = aws.settings
    return SegmentObservationStore(aws.client("s3"), aws.client("dynamodb"), s.documents_bucket,
                                   s.observations_table, s.retention_days,
                                   now_ms=lambda: now_ms, **kw)


@pytest.fixture
def store(aws) -> SegmentObservationStore:
    return new_store(aws)


def keys(aws, prefix: str = "observations/") -> list[str]:
    pages = aws.client("s3").get_paginator("list_objects_v2").paginate(
        Bucket=aws.settings.documents_bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def index(aws, store: SegmentObservationStore, deployment: str = "coder") -> list[Segment]:
    return list(store.segments("demo", deployment, 0, 10**13 - 1))


def window(store: SegmentObservationStore, deployment: str = "coder") -> list[StoredObservation]:
    return list(store.query("demo", deployment, 0, 10**13 - 1))


def test_a_batch_is_one_gzip_json_lines_object_per_hour_under_the_documented_key(aws, store):
    batch = [obs(n) for n in range(3)] + [obs(9, arrival=BASE_MS + HOUR_MS + 5)]
    stats = store.put_many(list(reversed(batch)))
    assert (stats.items, stats.skipped, stats.refused) == (4, 0, {})
    found = keys(aws)
    assert [k.rsplit("/", 1)[0] for k in found] == [
        "observations/tenant=demo/deployment=coder/date=2025-11-29/hour=20",
        "observations/tenant=demo/deployment=coder/date=2025-11-29/hour=21"]
    assert all(k.rsplit("/", 1)[1].startswith("s") and k.endswith(".json.gz") for k in found)
    body = aws.client("s3").get_object(Bucket=aws.settings.documents_bucket, Key=found[0])
    lines = gzip.decompress(body["Body"].read()).decode().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["observation_id"] for r in rows] == ["o-000000", "o-000001", "o-000002"]
    assert set(rows[0]) <= {c.name for c in COLUMNS}
    assert "tenant" not in rows[0]  # the key's partitions hold it


def test_index_items_describe_their_segment_and_expire_with_retention(aws, store):
    store.put_many([obs(n) for n in range(5)])
    [seg] = index(aws, store)
    assert (seg.rows, seg.min_arrival_ms, seg.max_arrival_ms) == (5, BASE_MS, BASE_MS + 4)
    assert seg.pk == "demo#coder#2025-11-29"
    assert seg.sk == f"{BASE_MS:013d}#{seg.seg_id}"
    assert seg.expires_at == INGEST_MS // 1000 + aws.settings.retention_days * 86_400
    head = aws.client("s3").head_object(Bucket=aws.settings.documents_bucket, Key=seg.key)
    assert head["ContentLength"] == seg.bytes


def test_the_same_batch_again_is_already_present_and_writes_no_new_segment(aws, store):
    batch = [obs(n) for n in range(50)]
    assert store.put_many(batch).items == 50
    # Another process, later, other pseudonyms (a rotated key): the same rows by identity.
    again = new_store(aws, now_ms=INGEST_MS + 60_000).put_many(
        [replace(o, session_id="v2:" + "f" * 64, key_version="v2") for o in batch])
    assert (again.items, again.skipped) == (0, 50)
    assert len(keys(aws)) == 1
    assert len(window(store)) == 50
    assert all(o.key_version is None for o in window(store))  # the first content is kept


def test_an_id_named_twice_in_one_batch_refuses_the_later_content(store):
    stats = store.put_many([obs(1), obs(2), obs(1, output_tokens=99, fingerprint="f" * 64)])
    assert (stats.items, stats.refused) == (2, {2: ID_CONFLICT})


def test_rows_resent_in_another_batch_are_stored_again_and_read_once(aws, store):
    store.put_many([obs(n) for n in range(10)])
    later = new_store(aws, now_ms=INGEST_MS + 1000)
    assert later.put_many([obs(n) for n in range(5, 15)]).items == 10
    read = store.query("demo", "coder", 0, 10**13 - 1)
    got = list(read)
    assert [o.observation_id for o in got] == [f"o-{n:06d}" for n in range(15)]
    assert (read.counts.duplicates, read.counts.conflicts) == (5, 0)


def test_an_id_naming_two_contents_across_batches_keeps_the_earliest_ingested(aws):
    # Capture stamps a batch's rows when it accepts them; two concurrent batches can reach the
    # store in the other order. The earlier accepted is kept whichever was written (or stamped
    # by the store) first: what SQL over the rows keeps too (docs/capture.md, SQL).
    accepted_first = new_store(aws, now_ms=INGEST_MS + 9)
    accepted_later = new_store(aws, now_ms=INGEST_MS + 5)
    accepted_later.put_many([obs(1, output_tokens=99, fingerprint="e" * 64,
                                 ingested_at_ms=INGEST_MS + 3), obs(2)])
    accepted_first.put_many([obs(1, ingested_at_ms=INGEST_MS + 1)])
    read = accepted_first.query("demo", "coder", 0, 10**13 - 1)
    got = list(read)
    assert [(o.observation_id, o.output_tokens) for o in got] == [("o-000001", 10),
                                                                   ("o-000002", 10)]
    assert read.counts.conflicts == 1


def test_derived_ids_are_their_own_fingerprint(aws, store):
    derived = [obs(n, observation_id=f"h-{n:032x}", fingerprint=None) for n in range(4)]
    store.put_many(derived[:3])
    new_store(aws, now_ms=INGEST_MS + 1).put_many(derived[1:])
    read = store.query("demo", "coder", 0, 10**13 - 1)
    assert list(read) == derived
    assert (read.counts.duplicates, read.counts.conflicts) == (2, 0)


def test_window_reads_only_overlapping_segments_in_arrival_then_id_order(aws, store):
    written = [obs(3, arrival=BASE_MS + 5), obs(1, arrival=BASE_MS + 5), obs(2, arrival=BASE_MS),
               obs(4, arrival=BASE_MS + 10), obs(5, deployment="other"), obs(6, tenant="other")]
    store.put_many(written)
    store.put_many([obs(7, arrival=BASE_MS + 3 * HOUR_MS)])
    read = store.query("demo", "coder", BASE_MS, BASE_MS + 10)
    assert [o.observation_id for o in read] == ["o-000002", "o-000001", "o-000003"]
    assert read.counts.segments == 1
    limited = store.query("demo", "coder", BASE_MS, BASE_MS + 11, limit=2)
    assert [o.observation_id for o in limited] == ["o-000002", "o-000001"]


def test_every_field_round_trips(store):
    full = obs(1, revision="r7", cached_input_tokens=64, ttft_ms=12.25,
               provenance="azure-csv:sha256:ab", timing_source="modeled",
               timing_model='{"name":"linear-v1"}', session_id="v2:" + "a" * 64,
               parent_session_id="v2:" + "b" * 64, shared_prefix_id="v2:" + "c" * 64,
               prefix_block_ids=("v2:" + "d" * 64, "v2:" + "e" * 64), prefix_block_size=512,
               key_version="v2", source="imported", outcome="timeout", streaming=False,
               sampling_rate=0.25)
    store.put_many([full])
    assert window(store) == [full]


def test_a_missing_object_is_skipped_and_counted(aws, store):
    store.put_many([obs(1)])
    store.put_many([obs(2, arrival=BASE_MS + HOUR_MS)])
    aws.client("s3").delete_object(Bucket=aws.settings.documents_bucket, Key=keys(aws)[0])
    read = store.query("demo", "coder", 0, 10**13 - 1)
    assert [o.observation_id for o in read] == ["o-000002"]
    assert read.counts.missing == 1


def test_delete_before_a_time_rewrites_the_segment_that_straddles_it(aws, store):
    # Versioned, as template.yaml declares it (and the local stack, which reads the template).
    assert aws.client("s3").get_bucket_versioning(
        Bucket=aws.settings.documents_bucket)["Status"] == "Enabled"
    store.put_many([obs(n) for n in range(30)] + [obs(1, deployment="keep")])
    store.put_many([obs(40, arrival=BASE_MS + HOUR_MS)])
    assert store.delete("demo", "coder", before_ms=BASE_MS + 10) == 10
    assert [o.arrival_ms - BASE_MS for o in window(store)] == [*range(10, 30), HOUR_MS]
    [straddled, _] = index(aws, store)
    assert (straddled.rows, straddled.min_arrival_ms) == (20, BASE_MS + 10)
    assert straddled.stored_at_ms == INGEST_MS  # a rewrite keeps when it was first stored
    assert store.delete("demo", "coder") == 21
    assert window(store) == []
    assert keys(aws, "observations/tenant=demo/deployment=coder/") == []
    assert len(window(store, "keep")) == 1
    # The bucket is versioned: deleting a segment deletes its version, not only its key.
    versions = aws.client("s3").list_object_versions(
        Bucket=aws.settings.documents_bucket, Prefix="observations/tenant=demo/deployment=coder/")
    assert versions.get("Versions", []) == versions.get("DeleteMarkers", []) == []


def test_a_cut_whose_kept_rows_are_a_stored_segment_already_leaves_that_one(aws, store):
    # Rows 10-19 were also sent as a batch of their own: cutting 0-9 out of the first segment
    # keeps exactly that batch's rows, whose segment (same rows, same key) is already indexed.
    store.put_many([obs(n) for n in range(20)])
    store.put_many([obs(n) for n in range(10, 20)])
    assert store.delete("demo", "coder", before_ms=BASE_MS + 10) == 10
    assert [o.arrival_ms - BASE_MS for o in window(store)] == list(range(10, 20))
    assert [(s.rows, s.retired) for s in index(aws, store)] == [(10, False)]
    assert len(keys(aws, "observations/tenant=demo/deployment=coder/")) == 1


def test_a_deletion_page_meets_a_bounded_number_of_segments_and_the_next_call_finishes(
        aws, store, monkeypatch):
    from infercrane.adapters.segments import store as module
    monkeypatch.setattr(module, "DELETE_PAGE", 2)
    for h in range(5):  # five segments, one per hour, three rows each
        store.put_many([obs(h * 10 + k, arrival=BASE_MS + h * HOUR_MS + k) for k in range(3)])
    assert store.delete_page("demo", "coder", None) == (6, False)
    assert len(window(store)) == 9
    assert store.delete_page("demo", "coder", None) == (6, False)
    assert store.delete_page("demo", "coder", None) == (3, True)
    assert window(store) == [] and keys(aws, "observations/tenant=demo/deployment=coder/") == []
    assert store.delete_page("demo", "coder", None) == (0, True)


def test_delete_import_removes_its_rows_and_keeps_the_others(aws, store):
    mine = [obs(n, observation_id=f"imp-a-{n}") for n in range(10)]
    theirs = [obs(n, observation_id=f"imp-b-{n}") for n in range(10)]
    store.put_many(mine + theirs)
    assert store.delete_import("demo", "coder", BASE_MS, BASE_MS + 10, "imp-a-") == 10
    assert {o.observation_id for o in window(store)} == {o.observation_id for o in theirs}


def test_a_trace_reports_id_conflicts_only_when_there_are_some(aws, store):
    from datetime import UTC, datetime

    from infercrane.domain.replay import TraceService
    from tests.fakes import FakeDocumentStore, FakeTraceStore

    def trace() -> dict[str, Any]:
        service = TraceService(store, FakeTraceStore(), FakeDocumentStore())
        until = datetime.fromtimestamp((BASE_MS + HOUR_MS) / 1000, UTC)
        return service.build_document("demo", "coder", "1h", until, 1000, until)

    store.put_many([obs(n) for n in range(10)])
    clean = trace()
    assert "id_conflicts" not in clean
    new_store(aws, now_ms=INGEST_MS + 1).put_many([obs(3, output_tokens=77, fingerprint="a" * 64)])
    conflicted = trace()
    assert conflicted["id_conflicts"] == 1
    assert conflicted["sample_count"] == 10
    assert {k: v for k, v in conflicted.items() if k not in ("id_conflicts", "digest")} == {
        k: v for k, v in clean.items() if k != "digest"}


def test_a_24_hour_window_reads_at_most_one_and_a_half_times_the_bytes_it_returns(aws, store):
    # Two days of traffic, 60 observations an hour in batches of 20 (three segments an hour).
    step = HOUR_MS // 60
    rows = [obs(n, arrival=BASE_MS + n * step) for n in range(48 * 60)]
    for i in range(0, len(rows), 20):
        store.put_many(rows[i:i + 20])
    start = BASE_MS + 11 * HOUR_MS + 17 * 60_000  # not on an hour: two partial hours
    end = start + 24 * HOUR_MS
    read = store.query("demo", "coder", start, end)
    returned = list(read)
    assert returned == [o for o in rows if start <= o.arrival_ms < end]
    # Bytes returned: each overlapping segment's bytes in proportion to its rows in the window.
    inside: dict[str, int] = {}
    segments = list(store.segments("demo", "coder", start, end))
    for seg in segments:
        inside[seg.seg_id] = sum(1 for o in rows[(seg.min_arrival_ms - BASE_MS) // step:
                                                 (seg.max_arrival_ms - BASE_MS) // step + 1]
                                 if start <= o.arrival_ms < end)
    returned_bytes = sum(seg.bytes * inside[seg.seg_id] / seg.rows for seg in segments)
    # 24 hours of three segments, and the one of the 25th hour that begins before the end.
    assert read.counts.segments == len(segments) == 24 * 3 + 1
    assert read.counts.bytes_read == sum(seg.bytes for seg in segments)
    assert read.counts.bytes_read / returned_bytes <= 1.5


def test_a_segment_past_its_expiry_is_not_read_before_ttl_deletes_it(aws):
    new_store(aws, now_ms=INGEST_MS).put_many([obs(1)])
    retention_ms = aws.settings.retention_days * 86_400_000
    just_before = new_store(aws, now_ms=INGEST_MS + retention_ms - 1000)
    assert len(window(just_before)) == 1
    after = new_store(aws, now_ms=INGEST_MS + retention_ms + 1000)
    assert window(after) == []  # the TTL has not run, the rows are past retention all the same
    assert after.delete("demo", "coder") == 1  # a deletion still takes it
