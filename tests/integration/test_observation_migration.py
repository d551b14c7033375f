"""The migration into segments, on a table written by the one-item layout's own code.

A tenant's legacy items are copied into segments page by page, idempotently (a re-run, or a run
resumed from any page's cursor, makes the same segments), and a trace built from the segments is
the trace the legacy layout gave: the same digest."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from infercrane.adapters.dynamo.observations import DynamoObservationStore
from infercrane.domain.observation import StoredObservation
from infercrane.domain.replay import TraceService
from infercrane.errors import InvalidInput
from tests.fakes import FakeDocumentStore, FakeTraceStore

HOUR_START_MS = 1_764_446_400_000  # 2025-11-29T20:00:00Z
# Ingested an hour ago: the copy keeps each row's expiry (ingest + retention), so rows ingested
# longer ago than the retention would be expired (and left out of every read) once copied.
INGEST_MS = int(time.time() * 1000) - 3_600_000


def obs(n: int, deployment: str = "coder", **over: Any) -> StoredObservation:
    # 700 rows over two hours: 600 (two segments: 500 and 100) and 100.
    arrival = HOUR_START_MS + (n * 6_000 if n < 600 else 3_600_000 + (n - 600) * 30_000)
    fields: dict[str, Any] = {
        "tenant": "demo", "deployment": deployment, "observation_id": f"gw-{n:05d}",
        "arrival_ms": arrival, "input_tokens": 100 + n % 50, "output_tokens": 10 + n % 7,
        "latency_ms": 250.5 + n % 11, "outcome": "ok", "streaming": n % 2 == 0,
        "sampling_rate": 1.0, "source": "captured", "ingested_at_ms": INGEST_MS + n,
        "session_id": f"v1:{n % 13:064x}", "key_version": "v1", "fingerprint": f"{n:064x}"}
    fields.update(over)
    return StoredObservation(**fields)


ROWS = [obs(n) for n in range(700)]


@pytest.fixture
def legacy(aws) -> DynamoObservationStore:
    """Today's store: it wrote the table the migration reads."""
    store = aws.container.legacy_observations
    assert store.put_many(ROWS).items == 700
    assert store.put_many([obs(1, "other"), obs(2, "other")]).items == 2
    assert store.put_many([obs(1, "theirs", tenant="acme")]).items == 1
    return store


def run(aws, deployment: str, max_rows: int) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = aws.container.observation_migration.page("demo", deployment, cursor, max_rows)
        pages.append(page.document())
        cursor = page.cursor
        if cursor is None:
            return pages


def trace(store: Any, deployment: str = "coder") -> dict[str, Any]:
    service = TraceService(store, FakeTraceStore(), FakeDocumentStore())
    until = datetime.fromtimestamp((HOUR_START_MS + 4 * 3_600_000) / 1000, UTC)
    return service.build_document("demo", deployment, "6h", until, 5000, until)


def test_the_tenants_legacy_deployments_are_listed_page_by_page(aws, legacy):
    found, cursor = [], None
    while True:
        page, cursor = aws.container.observation_migration.deployments("demo", cursor, limit=100)
        found.extend(page)
        if cursor is None:
            break
    assert sorted(set(found)) == ["coder", "other"]


@pytest.mark.parametrize("cursor", ["", "\n", "demo#coder", "other#coder\n0001#x", "demo#coder\n"])
def test_a_deployments_cursor_no_page_returned_is_a_400_not_a_503(aws, legacy, cursor):
    # An empty key attribute would be DynamoDB's ValidationException (a 503); another tenant's
    # key would start this tenant's Scan elsewhere.
    with pytest.raises(InvalidInput) as raised:
        aws.container.observation_migration.deployments("demo", cursor, limit=100)
    assert raised.value.field == "cursor"


def test_migration_copies_every_row_into_hour_segments_of_at_most_500(aws, legacy):
    pages = run(aws, "coder", max_rows=50_000)
    assert [(p["copied"], p["stored"], p["segments"], p["cursor"]) for p in pages] == [
        (700, 700, 3, None)]
    segments = list(aws.container.observations.segments("demo", "coder", 0, 10**13 - 1))
    assert [s.rows for s in segments] == [500, 100, 100]
    assert list(aws.container.observations.query("demo", "coder", 0, 10**13 - 1)) == ROWS
    # Stored at, and expiring with, each segment's first ingest (ingest + retention), not the
    # copy's: no row outlives its own retention. Segments begin at rows 0, 500 and 600.
    assert [s.stored_at_ms for s in segments] == [ROWS[n].ingested_at_ms for n in (0, 500, 600)]
    assert [s.expires_at for s in segments] == [
        ROWS[n].ingested_at_ms // 1000 + 30 * 86_400 for n in (0, 500, 600)]


def test_a_rerun_and_a_paged_run_write_the_same_segments_and_store_nothing_new(aws, legacy):
    run(aws, "coder", max_rows=50_000)
    keys = sorted(s.key for s in aws.container.observations.segments("demo", "coder", 0,
                                                                      10**13 - 1))
    again = run(aws, "coder", max_rows=50_000)
    assert [(p["copied"], p["stored"], p["already_present"]) for p in again] == [(700, 0, 700)]
    paged = run(aws, "coder", max_rows=50)  # a cursor inside the first hour, then at the second
    assert [p["copied"] for p in paged] == [500, 100, 100]
    # Each cursor is the last copied row's key.
    assert [p["cursor"] for p in paged] == [f"{ROWS[499].arrival_ms:013d}#gw-00499",
                                            f"{ROWS[599].arrival_ms:013d}#gw-00599", None]
    assert sum(p["stored"] for p in paged) == 0
    assert sorted(s.key for s in aws.container.observations.segments(
        "demo", "coder", 0, 10**13 - 1)) == keys


def test_a_page_from_a_fresh_table_resumed_by_cursor_equals_a_whole_run(aws, legacy):
    paged = run(aws, "coder", max_rows=50)
    assert sum(p["stored"] for p in paged) == 700
    assert list(aws.container.observations.query("demo", "coder", 0, 10**13 - 1)) == ROWS


def test_a_trace_from_segments_has_the_digest_the_legacy_layout_gave(aws, legacy):
    before = trace(legacy)
    run(aws, "coder", max_rows=50_000)
    after = trace(aws.container.observations)
    assert after["sample_count"] == 700
    assert after["digest"] == before["digest"]


def test_a_cursor_not_made_by_a_page_is_refused(aws, legacy):
    for cursor in ("junk", "1:7", "-1:0", f"{HOUR_START_MS}:500", f"{HOUR_START_MS}#"):
        with pytest.raises(InvalidInput):
            aws.container.observation_migration.page("demo", "coder", cursor)


def test_deletions_also_delete_the_one_item_layouts_items_migrated_or_not(aws, legacy):
    run(aws, "coder", max_rows=50_000)
    cut = HOUR_START_MS + 3_600_000
    assert aws.container.capture.delete("demo", "coder",
                                        datetime.fromtimestamp(cut / 1000, UTC)) == 600
    assert [o.arrival_ms >= cut for o in legacy.query("demo", "coder", 0, 10**13 - 1)] == [
        True] * 100
    assert aws.container.capture.delete("demo", "other") == 2  # never migrated
    assert list(legacy.query("demo", "other", 0, 10**13 - 1)) == []


def test_a_deletion_between_pages_leaves_every_kept_row_to_be_copied(aws):
    legacy = aws.container.legacy_observations
    hour = [obs(n, "paged", arrival_ms=HOUR_START_MS + n * 1000) for n in range(1200)]
    assert legacy.put_many(hour).items == 1200
    migration = aws.container.observation_migration
    page = migration.page("demo", "paged", None, max_rows=500)
    assert page.copied == 500
    # The tenant deletes rows before row 700, in both layouts, between two pages.
    aws.container.observations.delete("demo", "paged", HOUR_START_MS + 700 * 1000)
    cursor = page.cursor
    while cursor is not None:
        cursor = migration.page("demo", "paged", cursor, max_rows=500).cursor
    assert list(aws.container.observations.query("demo", "paged", 0, 10**13 - 1)) == hour[700:]


def test_a_deletion_answering_while_a_page_copies_stays_deleted(aws, monkeypatch):
    legacy = aws.container.legacy_observations
    assert legacy.put_many([obs(n, "racing") for n in range(10)]).items == 10
    store = aws.container.observations
    write = store.put_migrated

    def deleted_first(rows):  # type: ignore[no-untyped-def]
        # DELETE .../observations runs whole after the page read its rows, before it writes.
        assert store.delete("demo", "racing") == 10
        return write(rows)

    monkeypatch.setattr(store, "put_migrated", deleted_first)
    aws.container.observation_migration.page("demo", "racing")
    assert list(store.query("demo", "racing", 0, 10**13 - 1)) == []
    listed = aws.client("s3").list_object_versions(
        Bucket=aws.settings.documents_bucket,
        Prefix="observations/tenant=demo/deployment=racing/")
    assert listed.get("Versions", []) == []  # nor left for SQL to read


def test_a_paged_delete_bounds_the_one_item_layouts_work_per_call_and_counts_each_once(
        aws, legacy, monkeypatch):
    # 700 items and their id claims, never migrated: at most 300 items a call, so a DELETE of a
    # big one-item partition answers `finished: false` in time instead of running out of it.
    monkeypatch.setattr("infercrane.adapters.segments.store.DELETE_PAGE", 300)
    answers = []
    while not answers or not answers[-1][1]:
        answers.append(aws.container.capture.delete_page("demo", "coder", None))
        assert len(answers) < 20
    assert len(answers) >= 3
    assert sum(deleted for deleted, _ in answers) == 700  # each call counts its own rows
    assert list(legacy.query("demo", "coder", 0, 10**13 - 1)) == []
    assert aws.container.capture.delete("demo", "coder") == 0
