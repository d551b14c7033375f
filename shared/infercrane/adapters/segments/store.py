"""The observation store on segments: objects in the documents bucket, one index item each.

Write order, per segment: the deployment's day marker (once per process and day), then the object
(`IfNoneMatch="*"`: never overwritten; a 412 means a segment of the same rows is there), then its
index item (`attribute_not_exists(sk)`). The index item makes a segment visible, so an object
without one (a crash in between) is invisible and a re-send completes it; the condition on the
index item makes `stored` exact: of concurrent identical batches exactly one writes it.

Writing a segment is `writing.py`. Deleting rows (`deletion.py`) writes the kept rows as a new
segment and retires the old index item in one transaction before it removes anything; reads skip
retired items, so a crash leaves an invisible retired segment or an index item whose object is
gone (skipped when read; a re-run removes either), never a deleted row visible after the claim,
nor a kept row lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.adapters.segments.deletion import SegmentDeletion
from infercrane.adapters.segments.layout import (
    Segment,
    day_of,
    days_pk,
    identity,
    index_pk,
    order,
)
from infercrane.adapters.segments.reading import (
    READAHEAD,
    ReadCounts,
    SegmentRead,
    count_unreadable,
)
from infercrane.domain.observation import ID_CONFLICT, StoredObservation
from infercrane.domain.observation_rows import hour_of
from infercrane.errors import DependencyUnavailable
from infercrane.ports.observations import LegacyObservations, WriteStats

_MISSING = {"NoSuchKey", "404", "NotFound"}
_UNAVAILABLE = "The observation store is unavailable."
_FAR_FUTURE_MS = 10**13 - 1  # the largest arrival an index sort key holds (13 digits)
# Segments one DELETE call meets at most: up to 250,000 rows and ~1,000 requests (a wholly deleted
# segment takes two), inside API Gateway's 29 s; the answer's `finished` says to call again.
DELETE_PAGE = 500


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class SegmentObservationStore(SegmentDeletion):
    def __init__(self, s3: Any, dynamodb: Any, bucket: str, table: str, retention_days: int,
                 now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
                 parallel: int = 4,
                 legacy: Callable[[], LegacyObservations] | None = None,
                 readahead: int = READAHEAD):
        self._s3 = s3
        self._ddb = dynamodb
        self._bucket = bucket
        self._table = table
        self._retention_s = retention_days * 86_400
        self._now_ms = now_ms
        self._parallel = parallel
        # Reads load segments ahead of their merge in one pool per store, reused across reads
        # (a Lambda's process serves many): created on the first read, its threads on demand.
        self._readahead = readahead
        self._read_pool: ThreadPoolExecutor | None = None
        self._read_pool_lock = threading.Lock()
        # Items of the one-item layout (before segments) are invisible to reads but still
        # stored until their TTL: every deletion deletes them too, migrated or not. Built on
        # first use: capture and reads never pay for the old layout's client.
        self._legacy = legacy
        self._days: set[tuple[str, str, str]] = set()  # day markers known to exist
        # Tests only: called after each write request that succeeded, to crash between writes.
        self.fault_after_write: Callable[[], None] | None = None

    # -- writes ------------------------------------------------------------------------------
    def _wrote(self) -> None:
        if self.fault_after_write is not None:
            self.fault_after_write()

    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        """`items` = rows of segments this call made visible (`stored`); `skipped` = rows of
        segments of the same rows already indexed (`already_present`); `refused` = an id named
        twice in this batch with two contents (the later ones). Rows re-sent within another
        batch are stored again and deduplicated when read (docs/capture.md, Storage)."""
        refused: dict[int, str] = {}
        seen: dict[tuple[str, str, str], str] = {}  # (tenant, deployment, id) -> identity
        unique: dict[tuple[str, str, str], StoredObservation] = {}
        for i, o in enumerate(observations):
            oid, fp = identity(o)
            first = seen.setdefault((o.tenant, o.deployment, oid), fp)
            if first != fp:
                refused[i] = ID_CONFLICT
            else:
                unique.setdefault((o.tenant, o.deployment, oid), o)
        groups: dict[tuple[str, str, int], list[StoredObservation]] = {}
        for o in unique.values():
            groups.setdefault((o.tenant, o.deployment, hour_of(o.arrival_ms)), []).append(o)
        now = self._now_ms()
        expires = now // 1000 + self._retention_s
        chunks = list(groups.values())
        results = self._map(lambda rows: self._write_segment(rows, now, expires), chunks)
        new_ids = {(o.tenant, o.deployment, o.observation_id)
                   for rows, (new, _) in zip(chunks, results, strict=True) if new for o in rows}
        stored = sum(1 for i, o in enumerate(observations)
                     if i not in refused and (o.tenant, o.deployment, o.observation_id) in new_ids)
        return WriteStats(items=stored, requests=sum(r for _, r in results), retries=0,
                          skipped=len(observations) - stored - len(refused), refused=refused)

    def put_migrated(self, rows: Sequence[StoredObservation]) -> bool:
        """Rows of one (tenant, deployment, hour) copied from the one-item layout, as one
        segment; True when new. They keep their ingest times (what reads rank copies of one id
        by); the segment is stored at their first ingest and expires with it: no row outlives
        its retention by the copy, and a row expires early by at most the spread of the
        segment's ingest times."""
        first = min(o.ingested_at_ms for o in rows)
        new, _ = self._write_segment(sorted(rows, key=order), first,
                                     first // 1000 + self._retention_s)
        return new

    def _map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if len(items) <= 1 or self._parallel <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=min(self._parallel, len(items))) as pool:
            return list(pool.map(fn, items))

    # -- reads -------------------------------------------------------------------------------
    def _query(self, pk: str, condition: str, values: dict[str, Any]) -> Iterator[dict[str, Any]]:
        start: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "TableName": self._table, "ConsistentRead": True,
                "KeyConditionExpression": "pk = :pk AND " + condition,
                "ExpressionAttributeValues": {":pk": {"S": pk}, **values}}
            if start:
                kwargs["ExclusiveStartKey"] = start
            try:
                page = self._ddb.query(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise DependencyUnavailable(_UNAVAILABLE) from exc
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def _day_list(self, tenant: str, deployment: str, first: str, last: str) -> Iterator[str]:
        for item in self._query(days_pk(tenant, deployment), "sk BETWEEN :a AND :b",
                                {":a": {"S": first}, ":b": {"S": last}}):
            yield item["sk"]["S"]

    def segments(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                 expired: bool = False, retired: bool = False,
                 unreadable: Callable[[str], None] | None = None) -> Iterator[Segment]:
        """Index items of the segments holding arrivals in [start_ms, end_ms), in order of
        their first arrival, read lazily day by day. Segments past their expiry are left out
        unless `expired` (deletion takes them too): DynamoDB's TTL deletes an item up to days
        late, and the lifecycle rule may already have taken its object. An item that is no
        segment's (attributes missing or of another type) is given to `unreadable` (its sort
        key) and skipped; without it, it raises."""
        if end_ms <= start_ms:
            return
        now_s = self._now_ms() // 1000
        # A segment holds one hour: one that reaches start_ms begins at its hour or later.
        low = max(hour_of(max(start_ms, 0)), 0)
        for day in self._day_list(tenant, deployment, day_of(low), day_of(end_ms - 1)):
            for raw in self._query(index_pk(tenant, deployment, day), "sk BETWEEN :a AND :b",
                                   {":a": {"S": f"{low:013d}"}, ":b": {"S": f"{end_ms - 1:013d}$"}}):
                try:
                    seg = Segment.from_item(tenant, deployment, raw)
                except (KeyError, ValueError, TypeError, IndexError):
                    if unreadable is None:
                        raise
                    unreadable(str(raw.get("sk", {}).get("S", "")))
                    continue
                if seg.max_arrival_ms >= start_ms and (expired or seg.expires_at > now_s) and (
                        retired or not seg.retired):
                    yield seg

    def fetch(self, seg: Segment) -> bytes | None:
        """The object's bytes; None when it is gone (deleted, or expired before its index)."""
        try:
            # The key, not the version: reading the deleted bytes of an unversioned delete (a
            # delete marker) must answer "gone".
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=seg.key)["Body"].read()
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return body

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, decided: Mapping[str, str] | None = None) -> SegmentRead:
        """The port's query; the returned iterator's `counts` tells duplicates dropped, id
        conflicts, missing and unreadable segments (an unreadable index item is counted when
        the walk passes it: reading ahead, up to `readahead` items past the last segment a read
        stopped at `limit` opened)."""
        if limit is not None and limit <= 0:
            end_ms = start_ms
        # The index walk counts its unreadable items into the read's counts: the closure holds
        # the counts (the read does not exist yet when the walk is made).
        counts = ReadCounts()
        # Each item once: a re-query after a gone segment walks again items the first walk
        # (reading up to `readahead` items ahead of the merge) already counted.
        counted: set[str] = set()

        def unreadable(key: str) -> None:
            if key not in counted:
                counted.add(key)
                count_unreadable(counts, key)

        segments = self.segments(tenant, deployment, start_ms, end_ms, unreadable=unreadable)
        def requery(from_ms: int) -> Iterator[Segment]:
            return self.segments(tenant, deployment, max(start_ms, from_ms), end_ms,
                                 unreadable=unreadable)

        return SegmentRead(segments, self.fetch, start_ms, end_ms, limit, decided, requery,
                           pool=self._reader_pool(), readahead=self._readahead, counts=counts)

    def _reader_pool(self) -> ThreadPoolExecutor | None:
        if self._readahead <= 0:
            return None
        with self._read_pool_lock:
            if self._read_pool is None:
                self._read_pool = ThreadPoolExecutor(max_workers=self._readahead,
                                                     thread_name_prefix="segment-readahead")
            return self._read_pool

    def retained(self, tenant: str, deployment: str) -> bool:
        """Whether any segment of the deployment is indexed and unexpired: the index only (its
        day list, then each day's items until one), no object fetched."""
        return next(self.segments(tenant, deployment, 0, _FAR_FUTURE_MS), None) is not None

    # -- deletion (adapters/segments/deletion.py) -------------------------------------------
    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        """Rows deleted (up to: a row re-sent in two batches counts twice): every row (or every
        row arriving before `before_ms`), in the one-item layout, then in segments; a migrated
        row is in both, so the larger count is returned. The one-item layout goes first: a
        migration page that wrote its segment after this walk passed finds its rows gone there
        and takes them out again (`drop_migrated`)."""
        return self._delete(tenant, deployment, before_ms, None)[0]

    def delete_page(self, tenant: str, deployment: str, before_ms: int | None,
                    ) -> tuple[int, bool]:
        """`delete` meeting at most `DELETE_PAGE` segments, after at most `DELETE_PAGE` items
        of the one-item layout (the segments wait until those are done): (rows this call
        deleted, whether finished). Counts are this call's: summed across calls, a migrated row
        deleted from both layouts in different calls counts twice."""
        return self._delete(tenant, deployment, before_ms, DELETE_PAGE)

    def _delete(self, tenant: str, deployment: str, before_ms: int | None,
                limit: int | None) -> tuple[int, bool]:
        legacy = 0
        if self._legacy is not None:
            legacy, done = self._legacy().delete_page(tenant, deployment, before_ms, limit)
            if not done:  # the one-item layout first (`delete`): segments on a later call
                return legacy, False
        end = _FAR_FUTURE_MS if before_ms is None else before_ms

        def choose(seg: Segment) -> Callable[[StoredObservation], bool] | None:
            if before_ms is None or seg.max_arrival_ms < before_ms:
                return None  # wholly deleted
            return lambda o: o.arrival_ms < end

        deleted, finished = self._walk(tenant, deployment, 0, end, choose, limit)
        return max(legacy, deleted), finished

    def delete_import(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                      id_prefix: str) -> int:
        """One import's rows: those of [start_ms, end_ms) whose id begins with its prefix (in
        both layouts, in the order and with the count of `delete`)."""
        def drop(o: StoredObservation) -> bool:
            return start_ms <= o.arrival_ms < end_ms and o.observation_id.startswith(id_prefix)

        legacy = 0 if self._legacy is None else self._legacy().delete_import(
            tenant, deployment, start_ms, end_ms, id_prefix)
        return max(legacy, self._walk(tenant, deployment, start_ms, end_ms, lambda _: drop)[0])

    def drop_migrated(self, rows: Sequence[StoredObservation]) -> None:
        """Take rows a migration page copied out of segments again: a deletion removed them from
        the one-item layout while the page ran (its walk may have passed the page's segment)."""
        keys = {(o.tenant, o.deployment, o.arrival_ms, o.observation_id) for o in rows}
        for tenant, deployment in {(k[0], k[1]) for k in keys}:
            arrivals = [k[2] for k in keys if k[:2] == (tenant, deployment)]

            def drop(o: StoredObservation) -> bool:
                return (o.tenant, o.deployment, o.arrival_ms, o.observation_id) in keys

            self._walk(tenant, deployment, min(arrivals), max(arrivals) + 1, lambda _: drop)
