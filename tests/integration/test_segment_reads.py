"""Reading a window from segments (issue 27): a read fetches only the segments its rows need, an
id's conflicts are decided alike wherever a read starts, each conflicting observation counts once,
and a segment that cannot be read is skipped and counted, never a failed window."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import tempfile
import threading
from datetime import UTC, datetime
from typing import Any

from infercrane.adapters.segments.layout import Segment
from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import HOUR_MS
from infercrane.domain.replay import TraceService
from infercrane.domain.trace_window import id_conflicts, in_memory_trace, stream_window
from infercrane.domain.windows import Window
from tests.fakes import (
    FakeDocumentStore,
    FakeQueue,
    FakeTraceBuildStore,
    FakeTraceStore,
    local_signer,
)

BASE_MS = 1_764_446_400_000  # an hour's start
INGEST_MS = 1_764_450_000_123
END = 10**13 - 1


def obs(n: int, *, arrival: int | None = None, oid: str | None = None, fp: str | None = None,
        **over: Any) -> StoredObservation:
    fields: dict[str, Any] = {
        "tenant": "demo", "deployment": "coder", "observation_id": oid or f"o-{n:06d}",
        "arrival_ms": BASE_MS + n if arrival is None else arrival, "input_tokens": 100 + n,
        "output_tokens": 10, "latency_ms": 250.5, "outcome": "ok", "streaming": True,
        "sampling_rate": 1.0, "source": "captured", "ingested_at_ms": INGEST_MS,
        "fingerprint": fp or f"{n:064x}"}
    fields.update(over)
    return StoredObservation(**fields)


class CountingStore(SegmentObservationStore):
    fetched = 0
    # Reads load segments ahead in the store's pool: fetches run on its threads, concurrently.
    _count_lock = threading.Lock()

    def fetch(self, seg: Segment) -> bytes | None:
        with self._count_lock:
            self.fetched += 1
        return super().fetch(seg)


def new_store(aws) -> CountingStore:
    s = aws.settings
    return CountingStore(aws.client("s3"), aws.client("dynamodb"), s.documents_bucket,
                         s.observations_table, s.retention_days, now_ms=lambda: INGEST_MS,
                         parallel=1)


def rows_of(read: Any) -> list[tuple[str, int]]:
    return [(o.observation_id, o.arrival_ms - BASE_MS) for o in read]


def thirty_hours(store: SegmentObservationStore) -> None:
    for b in range(30):
        store.put_many([obs(b * 10 + k, arrival=BASE_MS + b * HOUR_MS + k) for k in range(3)])


def test_a_read_stopped_at_one_row_fetches_only_the_first_segment(aws):
    store = new_store(aws)
    thirty_hours(store)
    read = store.query("demo", "coder", 0, END, limit=1)
    assert rows_of(read) == [("o-000000", 0)]
    assert (read.counts.segments, store.fetched) == (1, 1)


def test_a_read_fetches_the_segments_sharing_the_first_arrival_and_no_later_one(aws):
    store = new_store(aws)
    thirty_hours(store)
    store.put_many([obs(900, arrival=BASE_MS)])  # another batch, the same first arrival
    read = store.query("demo", "coder", 0, END, limit=1)
    assert rows_of(read) == [("o-000000", 0)]
    assert store.fetched == 2


def test_a_whole_read_opens_each_segment_once_in_order(aws):
    store = new_store(aws)
    thirty_hours(store)
    read = store.query("demo", "coder", 0, END)
    assert rows_of(read) == [(f"o-{b * 10 + k:06d}", b * HOUR_MS + k)
                             for b in range(30) for k in range(3)]
    assert (read.counts.segments, store.fetched) == (30, 30)


def test_whether_a_deployment_is_known_fetches_no_segment(aws):
    store = new_store(aws)
    thirty_hours(store)
    service = TraceService(store, FakeTraceStore(), FakeDocumentStore())
    assert service.known_deployment("demo", "coder")
    assert not service.known_deployment("demo", "other")
    assert store.fetched == 0


def test_a_read_from_later_in_the_window_decides_a_conflict_as_the_whole_read(aws):
    store = new_store(aws)
    store.put_many([obs(10, oid="gw-x", fp="a" * 64)])
    store.put_many([obs(20, oid="gw-x", fp="b" * 64), obs(30)])
    whole = store.query("demo", "coder", 0, END)
    assert rows_of(whole) == [("gw-x", 10), ("o-000030", 30)]  # the first content is kept
    later = store.query("demo", "coder", BASE_MS + 15, END, decided=whole.named)
    assert rows_of(later) == [("o-000030", 30)]
    assert later.counts.conflicts == 1


def test_one_conflicting_observation_stored_in_two_batches_is_one_conflict_one_duplicate(aws):
    store = new_store(aws)
    store.put_many([obs(10, oid="gw-x", fp="a" * 64)])
    store.put_many([obs(20, oid="gw-x", fp="b" * 64), obs(30)])
    store.put_many([obs(20, oid="gw-x", fp="b" * 64), obs(40)])  # the same row, re-cut batch
    read = store.query("demo", "coder", 0, END)
    assert rows_of(read) == [("gw-x", 10), ("o-000030", 30), ("o-000040", 40)]
    assert (read.counts.conflicts, read.counts.duplicates) == (1, 1)


def test_a_truncated_streamed_build_equals_the_in_memory_one_with_a_conflict_before_its_slice(
        aws):
    store = new_store(aws)
    store.put_many([obs(0, oid="gw-x", fp="a" * 64, arrival=BASE_MS)])
    rows = [obs(n, arrival=BASE_MS + 1000 * n + (n * 7919) % 900,
                input_tokens=50 + (n * 37) % 400, session_id=f"v1:{n:064x}", key_version="v1")
            for n in range(1, 400)]
    conflicting = obs(999, oid="gw-x", fp="b" * 64, arrival=BASE_MS + 100_500)
    store.put_many([*rows, conflicting])
    win = Window(BASE_MS, BASE_MS + HOUR_MS)

    def read(start: int, limit: int | None, decided: Any = None) -> Any:
        return store.query("demo", "coder", start, win.end_ms, limit=limit, decided=decided)

    at = datetime(2026, 1, 1, tzinfo=UTC)
    whole = read(win.start_ms, None)
    found = list(whole)
    assert conflicting not in found and len(found) == 400
    in_memory = in_memory_trace(found, deployment="coder", window=win, max_requests=100,
                                select="representative", built_at=at, request_id=None,
                                software=None, conflicts=id_conflicts(whole)).document
    assert in_memory["id_conflicts"] == 1 and in_memory["truncated"]
    # The slice starts after the conflict's first content (at 0), and holds its other one.
    span = {k: datetime.fromisoformat(in_memory["selection"]["span"][k]).timestamp() * 1000
            for k in ("start", "end")}
    assert win.start_ms < span["start"] <= conflicting.arrival_ms <= span["end"], span
    with tempfile.TemporaryFile() as spool:
        streamed = stream_window(read, spool, deployment="coder", window=win, max_requests=100,
                                 select="representative", progress=lambda n: None,
                                 built_at=lambda: at, request_id=None, software=None)
    assert streamed is not None
    assert streamed.digest == in_memory["digest"]


def test_a_build_answered_at_once_counts_id_conflicts_as_every_other_path(aws):
    store = new_store(aws)
    store.put_many([obs(10, oid="gw-x", fp="a" * 64, session_id="v1:" + "1" * 64,
                        key_version="v1")])
    store.put_many([obs(20, oid="gw-x", fp="b" * 64),
                    obs(30, session_id="v1:" + "2" * 64, key_version="v1")])
    until = datetime.fromtimestamp((BASE_MS + HOUR_MS) / 1000, UTC)
    whole = TraceService(store, FakeTraceStore(), FakeDocumentStore()).build_document(
        "demo", "coder", "1h", until, 100, until)
    api = TraceService(store, FakeTraceStore(), FakeDocumentStore(),
                       builds=FakeTraceBuildStore(), build_queue=FakeQueue(),
                       signer=local_signer())
    answered = api.request_build("demo", "coder", "1h", until, 100, until)
    assert answered.header is not None
    assert whole["id_conflicts"] == answered.header["id_conflicts"] == 1
    assert answered.header["digest"] == whole["digest"]


def _segments(aws, store: SegmentObservationStore) -> list[Segment]:
    return list(store.segments("demo", "coder", 0, END))


def test_unreadable_segments_are_skipped_counted_and_logged_by_key_only(aws, caplog):
    store = new_store(aws)
    for hour in range(5):
        store.put_many([obs(hour, arrival=BASE_MS + hour * HOUR_MS)])
    s3, ddb = aws.client("s3"), aws.client("dynamodb")
    bucket, table = aws.settings.documents_bucket, aws.settings.observations_table
    tampered, not_gzip, not_json, future, no_index = _segments(aws, store)
    # Bytes that are not what the index claims.
    s3.put_object(Bucket=bucket, Key=tampered.key, Body=gzip.compress(b'{"x":1}\n'))

    def replace_object(seg: Segment, body: bytes) -> None:  # and the index's claim with it
        s3.put_object(Bucket=bucket, Key=seg.key, Body=body)
        item = seg.item()
        item["sha256"] = {"S": hashlib.sha256(body).hexdigest()}
        ddb.put_item(TableName=table, Item=item)

    replace_object(not_gzip, b"not gzip at all")
    replace_object(not_json, gzip.compress(b'{"observation_id": "o-secret-row"\n'))
    item = future.item()
    item["schema_version"] = {"N": "99"}
    ddb.put_item(TableName=table, Item=item)
    item = no_index.item()
    del item["max_arrival_ms"]
    ddb.put_item(TableName=table, Item=item)
    store.put_many([obs(7, arrival=BASE_MS + 5 * HOUR_MS)])
    with caplog.at_level(logging.WARNING):
        read = store.query("demo", "coder", 0, END)
        got = rows_of(read)
    assert got == [("o-000007", 5 * HOUR_MS)]
    assert read.counts.unreadable == 5
    logged = " ".join(f"{r.getMessage()} {getattr(r, 'key', '')}" for r in caplog.records)
    assert tampered.key in logged and not_json.key in logged
    assert "secret" not in logged and '"x"' not in logged


def test_a_window_with_a_corrupt_segment_is_built_from_the_rest_not_a_500(aws):
    from tests.conftest import load_event
    from tests.integration.test_handlers_with_events import CONTEXT, handler
    from tests.integration.test_trace_routes import stored

    observations = aws.container.observations
    observations.put_many([stored(i) for i in range(10)])
    observations.put_many([stored(i) for i in range(10, 25)])
    first = next(seg for seg in observations.segments("acme", "coder-production", 0, END)
                 if seg.rows == 10)
    aws.client("s3").put_object(Bucket=aws.settings.documents_bucket, Key=first.key,
                                Body=b"\x1f\x8b corrupt")
    response = handler("api")(load_event("api_post_traces.json"), CONTEXT)
    assert response["statusCode"] == 201, response["body"]
    assert json.loads(response["body"])["sample_count"] == 15


def test_a_read_holding_an_index_page_while_a_segment_is_cut_still_returns_the_kept_rows(aws):
    # The reader has the index page naming the old segment; a deletion then replaces it by a
    # survivor (indexed after the page was read) and deletes its object: the kept rows are in
    # the survivor only.
    new_store(aws).put_many([obs(0), obs(10), obs(20)])
    new_store(aws).put_many([obs(30, arrival=BASE_MS + HOUR_MS)])
    deleter = new_store(aws)

    class Reader(CountingStore):
        def fetch(self, seg: Segment) -> bytes | None:
            if self.fetched == 0:
                assert deleter.delete("demo", "coder", BASE_MS + 5) == 1
            return super().fetch(seg)

    s = aws.settings
    reader = Reader(aws.client("s3"), aws.client("dynamodb"), s.documents_bucket,
                    s.observations_table, s.retention_days, now_ms=lambda: INGEST_MS, parallel=1)
    read = reader.query("demo", "coder", 0, END)
    assert rows_of(read) == [("o-000010", 10), ("o-000020", 20), ("o-000030", HOUR_MS)]
    assert read.counts.missing == 1


def test_a_requery_after_a_gone_segment_does_not_return_a_cut_survivors_rows_again(aws):
    # X (0, 10, 20, 30) is fetched and rows 0..20 returned; meanwhile X is cut (its survivor
    # X', first arrival 10, indexed after the reader's page) and G (25, on that page) loses its
    # object. Meeting G gone, the re-query must not open X': its rows are X's, below arrivals
    # already returned.
    new_store(aws).put_many([obs(0), obs(10), obs(20), obs(30)])
    new_store(aws).put_many([obs(25)])
    deleter = new_store(aws)
    s3 = aws.client("s3")

    class Reader(CountingStore):
        def fetch(self, seg: Segment) -> bytes | None:
            body = super().fetch(seg)
            if self.fetched == 1:
                assert deleter.delete("demo", "coder", BASE_MS + 5) == 1
                gone = next(g for g in deleter.segments("demo", "coder", 0, END)
                            if g.min_arrival_ms == BASE_MS + 25)
                s3.delete_object(Bucket=aws.settings.documents_bucket, Key=gone.key,
                                 VersionId=gone.version_id)
            return body

    s = aws.settings
    reader = Reader(aws.client("s3"), aws.client("dynamodb"), s.documents_bucket,
                    s.observations_table, s.retention_days, now_ms=lambda: INGEST_MS, parallel=1)
    read = reader.query("demo", "coder", 0, END)
    assert rows_of(read) == [("o-000000", 0), ("o-000010", 10), ("o-000020", 20),
                             ("o-000030", 30)]
    assert (read.counts.missing, read.counts.duplicates) == (1, 0)


def test_an_unreadable_index_item_is_counted_once_when_a_gone_segment_makes_the_read_requery(aws):
    # Hours 0..9; a foreign index item between hours 7 and 8; hour 6's object is gone. By hour
    # 6 the read loads four segments ahead, so its walk has passed the foreign item when hour 6
    # is found gone, and the re-query from hour 6 walks it again: one item, counted once.
    store = new_store(aws)
    for hour in range(10):
        store.put_many([obs(hour, arrival=BASE_MS + hour * HOUR_MS)])
    segs = _segments(aws, store)
    foreign = segs[7].item()
    foreign["sk"] = {"S": f"{BASE_MS + 7 * HOUR_MS + 1:013d}#foreign"}
    del foreign["max_arrival_ms"]
    aws.client("dynamodb").put_item(TableName=aws.settings.observations_table, Item=foreign)
    gone = segs[6]
    aws.client("s3").delete_object(Bucket=aws.settings.documents_bucket, Key=gone.key,
                                   VersionId=gone.version_id)
    read = store.query("demo", "coder", 0, END)
    assert [oid for oid, _ in rows_of(read)] == [f"o-{h:06d}" for h in range(10) if h != 6]
    assert (read.counts.missing, read.counts.unreadable) == (1, 1)
