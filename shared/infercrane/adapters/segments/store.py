"""The observation store on segments: objects in the documents bucket, one index item each.

Write order, per segment: the deployment's day marker (once per process and day), then the object
(`IfNoneMatch="*"`: never overwritten; a 412 means a segment of the same rows is there), then its
index item (`attribute_not_exists(sk)`). The index item makes a segment visible, so an object
without one (a crash in between) is invisible and a re-send completes it; the condition on the
index item makes `stored` exact: of concurrent identical batches exactly one writes it.

Deleting rows rewrites what it keeps before it removes anything: the kept rows as a new segment
and its index item, then the old object, then the old index item. A crash leaves duplicates
(deduplicated when read) or an index item whose object is gone (skipped when read; a re-run of
the deletion removes it), never a deleted row visible after the deletion answered, nor a kept row
lost.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.adapters.segments.layout import (
    Segment,
    day_of,
    days_pk,
    decode,
    encode,
    identity,
    index_pk,
    object_key,
    order,
    segment_id,
)
from infercrane.adapters.segments.reading import SegmentRead
from infercrane.domain.observation import ID_CONFLICT, StoredObservation
from infercrane.domain.observation_rows import hour_of
from infercrane.errors import DependencyUnavailable
from infercrane.ports.observations import LegacyObservations, WriteStats

_EXISTS = {"PreconditionFailed", "ConditionalRequestConflict"}  # S3: the key holds an object
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CONDITION = "ConditionalCheckFailedException"
_UNAVAILABLE = "The observation store is unavailable."
_FAR_FUTURE_MS = 10**13 - 1  # the largest arrival an index sort key holds (13 digits)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class SegmentObservationStore:
    def __init__(self, s3: Any, dynamodb: Any, bucket: str, table: str, retention_days: int,
                 now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
                 parallel: int = 4,
                 legacy: Callable[[], LegacyObservations] | None = None):
        self._s3 = s3
        self._ddb = dynamodb
        self._bucket = bucket
        self._table = table
        self._retention_s = retention_days * 86_400
        self._now_ms = now_ms
        self._parallel = parallel
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

    def _mark_day(self, tenant: str, deployment: str, day: str) -> int:
        """The deployment's list of days with segments: how a read without a bounded window
        (is this deployment known? delete everything before T) finds its index partitions. Kept
        when the day is emptied (it holds no row), written before any index item of the day."""
        if (tenant, deployment, day) in self._days:
            return 0
        try:
            self._ddb.put_item(TableName=self._table,
                               Item={"pk": {"S": days_pk(tenant, deployment)}, "sk": {"S": day}},
                               ConditionExpression="attribute_not_exists(sk)")
        except ClientError as exc:
            if _code(exc) != _CONDITION:
                raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._days.add((tenant, deployment, day))
        self._wrote()
        return 1

    def _put_object(self, key: str, body: bytes) -> tuple[str, int, str | None]:
        """(sha256, bytes, version) of the object now at `key`: ours, or the first one there."""
        sha = hashlib.sha256(body).hexdigest()
        try:
            put = self._s3.put_object(Bucket=self._bucket, Key=key, Body=body, IfNoneMatch="*",
                                      ContentType="application/gzip", Metadata={"sha256": sha})
            self._wrote()
            return sha, len(body), put.get("VersionId")
        except ClientError as exc:
            if _code(exc) not in _EXISTS:
                raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        # The same rows are stored (after a crash, or under other pseudonyms after a key
        # rotation): the object keeps its first content, which the index item must describe.
        try:
            head = self._s3.head_object(Bucket=self._bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return (str(head.get("Metadata", {}).get("sha256", "")), int(head["ContentLength"]),
                head.get("VersionId"))

    def _put_index(self, seg: Segment) -> bool:
        """True when this call made the segment visible, False when it already was."""
        try:
            self._ddb.put_item(TableName=self._table, Item=seg.item(),
                               ConditionExpression="attribute_not_exists(sk)")
        except ClientError as exc:
            if _code(exc) == _CONDITION:
                return False
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()
        return True

    def _write_segment(self, rows: Sequence[StoredObservation], stored_at_ms: int,
                       expires_at: int) -> tuple[bool, int]:
        """Store rows of one (tenant, deployment, hour); (whether new, requests made)."""
        first = rows[0]
        tenant, deployment, hour = first.tenant, first.deployment, hour_of(first.arrival_ms)
        seg_id = segment_id(tenant, deployment, hour, (identity(o) for o in rows))
        key = object_key(tenant, deployment, hour, seg_id)
        requests = self._mark_day(tenant, deployment, day_of(hour))
        sha, size, version = self._put_object(key, encode(rows))
        arrivals = [o.arrival_ms for o in rows]
        seg = Segment(tenant, deployment, seg_id, key, rows=len(rows), bytes=size,
                      min_arrival_ms=min(arrivals), max_arrival_ms=max(arrivals), sha256=sha,
                      stored_at_ms=stored_at_ms, expires_at=expires_at, version_id=version)
        return self._put_index(seg), requests + 2

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
        by) and their expiry: stored at their first ingest, expiring with their last (no row
        outlives its retention by the copy, none is cut short)."""
        ingested = [o.ingested_at_ms for o in rows]
        new, _ = self._write_segment(sorted(rows, key=order), min(ingested),
                                     max(ingested) // 1000 + self._retention_s)
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
                 expired: bool = False,
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
                if seg.max_arrival_ms >= start_ms and (expired or seg.expires_at > now_s):
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
        conflicts, missing and unreadable segments."""
        if limit is not None and limit <= 0:
            end_ms = start_ms
        def unreadable(key: str) -> None:  # called from the read's first row on: `read` is bound
            read.unreadable(key)

        segments = self.segments(tenant, deployment, start_ms, end_ms, unreadable=unreadable)
        read = SegmentRead(segments, self.fetch, start_ms, end_ms, limit, decided)
        return read

    def retained(self, tenant: str, deployment: str) -> bool:
        """Whether any segment of the deployment is indexed and unexpired: the index only (its
        day list, then each day's items until one), no object fetched."""
        return next(self.segments(tenant, deployment, 0, _FAR_FUTURE_MS), None) is not None

    # -- deletion ----------------------------------------------------------------------------
    def _delete_object(self, seg: Segment) -> None:
        extra = {} if seg.version_id is None else {"VersionId": seg.version_id}
        try:
            self._s3.delete_object(Bucket=self._bucket, Key=seg.key, **extra)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()

    def _delete_index(self, seg: Segment) -> None:
        try:
            self._ddb.delete_item(TableName=self._table,
                                  Key={"pk": {"S": seg.pk}, "sk": {"S": seg.sk}})
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()

    def _remove(self, seg: Segment) -> None:
        self._delete_object(seg)
        self._delete_index(seg)

    def _rewrite(self, seg: Segment, drop: Callable[[StoredObservation], bool]) -> int:
        """Remove the rows `drop` names from a segment; the rows removed."""
        body = self.fetch(seg)
        if body is None:  # its kept rows were rewritten before it went (or it expired)
            self._delete_index(seg)
            return 0
        rows = list(decode(seg.tenant, seg.deployment, body))
        kept = [o for o in rows if not drop(o)]
        if len(kept) == len(rows):
            return 0
        if kept:
            # The kept rows keep their ingest times (what reads rank copies of one id by) and
            # their expiry: a rewrite extends no retention.
            self._write_segment(sorted(kept, key=order), seg.stored_at_ms, seg.expires_at)
        self._remove(seg)
        return len(rows) - len(kept)

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        """Rows deleted: every row (or every row arriving before `before_ms`), in segments and
        in the one-item layout; a migrated row is in both, so the larger count is returned."""
        deleted = self._delete_segments(tenant, deployment, before_ms)
        if self._legacy is None:
            return deleted
        return max(deleted, self._legacy().delete(tenant, deployment, before_ms))

    def _delete_segments(self, tenant: str, deployment: str, before_ms: int | None) -> int:
        end = _FAR_FUTURE_MS if before_ms is None else before_ms
        deleted = 0
        for seg in list(self.segments(tenant, deployment, 0, end, expired=True)):
            if before_ms is None or seg.max_arrival_ms < before_ms:
                self._remove(seg)
                deleted += seg.rows
            else:
                deleted += self._rewrite(seg, lambda o: o.arrival_ms < end)
        return deleted

    def delete_import(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                      id_prefix: str) -> int:
        """One import's rows: those of [start_ms, end_ms) whose id begins with its prefix (in
        both layouts, as `delete`)."""
        def drop(o: StoredObservation) -> bool:
            return start_ms <= o.arrival_ms < end_ms and o.observation_id.startswith(id_prefix)

        deleted = sum(self._rewrite(seg, drop)
                      for seg in list(self.segments(tenant, deployment, start_ms, end_ms,
                                                    expired=True)))
        if self._legacy is None:
            return deleted
        return max(deleted, self._legacy().delete_import(tenant, deployment, start_ms, end_ms,
                                                         id_prefix))
