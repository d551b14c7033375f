"""Writing one segment: its object, its index item, and keeping the item's version alive.

The object is written `IfNoneMatch="*"`: a 412 means a segment of the same rows is there, and the
writer adopts its version (`created` False). An adopted version may be deleted after the 412 by
the writer that created it (a deletion that lost its claim, docs/capture.md "Storage") or by a
deletion of the segment: so whoever makes an index item name a version it did not create checks,
after the item is written, that the version exists (HEAD by VersionId), and puts the rows again
and repairs the item when it is gone (`_keep_named`). Never on a retired item: a retired item is a
segment a deletion is removing, and naming a new version there would revive deleted rows (or
leave bytes no item names once the deletion removes the item); a write meeting one deletes the
bytes it wrote there (`_repair_written`) and answers 503, retried after the deletion (or its
re-run, the client's retry of a DELETE) removed it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.adapters.segments.layout import (
    Segment,
    day_of,
    days_pk,
    encode,
    identity,
    object_key,
    segment_id,
)
from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import hour_of
from infercrane.errors import DependencyUnavailable

_EXISTS = "PreconditionFailed"  # S3 412: the key holds an object
_MISSING = {"NoSuchKey", "NoSuchVersion", "404", "NotFound"}
_CONDITION = "ConditionalCheckFailedException"
_UNAVAILABLE = "The observation store is unavailable."


class _Deleting(DependencyUnavailable):
    """A write met a retired index item: answered 503, retried after the deletion."""

    def __init__(self) -> None:
        super().__init__("The observation store is deleting these rows; retry.")

_ATTEMPTS = 3  # put or repair again: each retry follows another writer's completed step


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class SegmentWrites:
    """The write half shared by capture and deletion (`SegmentObservationStore` sets these)."""

    _s3: Any
    _ddb: Any
    _bucket: str
    _table: str
    _days: set[tuple[str, str, str]]
    fault_after_write: Callable[[], None] | None

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

    def _put_object(self, key: str, body: bytes) -> tuple[str, int, str | None, bool]:
        """(sha256, bytes, version, whether this call created it) of the object now at `key`:
        ours, or the first one there."""
        sha = hashlib.sha256(body).hexdigest()
        try:
            put = self._s3.put_object(Bucket=self._bucket, Key=key, Body=body, IfNoneMatch="*",
                                      ContentType="application/gzip", Metadata={"sha256": sha})
            self._wrote()
            return sha, len(body), put.get("VersionId"), True
        except ClientError as exc:
            # 409 ConditionalRequestConflict: another write to the key is in flight. Not an
            # answer about what is stored: transient (503), and the re-send converges.
            if _code(exc) != _EXISTS:
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
                head.get("VersionId"), False)

    def _put_index(self, seg: Segment) -> bool:
        """True when this call made the segment visible, False when it already was.

        An index item naming another version than the object's is repaired to name the
        object's: a deletion killed after deleting the object's version but before its index
        item, then a re-send (a new version, the index item still there), would otherwise leave
        the re-sent bytes unnamed, so the deletion's re-run would delete the old version only."""
        for _ in range(_ATTEMPTS):  # put, or repair; a concurrent deletion can remove the item between
            try:
                # The failed condition returns the item: a re-send costs no further request.
                self._ddb.put_item(TableName=self._table, Item=seg.item(),
                                   ConditionExpression="attribute_not_exists(sk)",
                                   ReturnValuesOnConditionCheckFailure="ALL_OLD")
                self._wrote()
                return True
            except ClientError as exc:
                if _code(exc) != _CONDITION:
                    raise DependencyUnavailable(_UNAVAILABLE) from exc
                old = exc.response.get("Item", {})
            except BotoCoreError as exc:
                raise DependencyUnavailable(_UNAVAILABLE) from exc
            if "retired" in old:  # being deleted: its rows may be deleted ones (module doc)
                raise _Deleting
            stored = old.get("version_id", {}).get("S")
            if seg.version_id is None or stored == seg.version_id or self._repair_version(seg):
                return False
        raise DependencyUnavailable(_UNAVAILABLE)

    def _repair_version(self, seg: Segment) -> bool:
        """Make the existing index item name `seg`'s version; False when the item is gone; 503
        when it is retired (module doc)."""
        try:
            self._ddb.update_item(
                TableName=self._table, Key={"pk": {"S": seg.pk}, "sk": {"S": seg.sk}},
                UpdateExpression="SET version_id = :v, sha256 = :s, #b = :b",
                ConditionExpression="attribute_exists(sk) AND attribute_not_exists(retired) AND "
                                    "(attribute_not_exists(version_id) OR version_id <> :v)",
                ExpressionAttributeNames={"#b": "bytes"},
                ExpressionAttributeValues={":v": {"S": str(seg.version_id)},
                                           ":s": {"S": seg.sha256},
                                           ":b": {"N": str(seg.bytes)}})
            self._wrote()
            return True
        except ClientError as exc:
            if _code(exc) != _CONDITION:
                raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        item = self._indexed(seg)  # names this version already, is retired, or is gone
        if item is not None and "retired" in item:
            raise _Deleting
        return item is not None

    def _indexed(self, seg: Segment) -> dict[str, Any] | None:
        """The index item at `seg`'s sort key (a consistent read), None when there is none."""
        try:
            got = self._ddb.get_item(TableName=self._table, ConsistentRead=True,
                                     Key={"pk": {"S": seg.pk}, "sk": {"S": seg.sk}})
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        item: dict[str, Any] | None = got.get("Item")
        return item

    def _version_exists(self, seg: Segment) -> bool:
        if seg.version_id is None:  # an unversioned bucket: the key is the object
            return True
        try:
            self._s3.head_object(Bucket=self._bucket, Key=seg.key, VersionId=seg.version_id)
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return False
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return True

    def _keep_named(self, seg: Segment, rows: Sequence[StoredObservation]) -> None:
        """After an index item was made to name `seg`'s version (adopted, not created): if that
        version is gone, put the rows again and repair the item to the new version (module
        doc). An item gone meanwhile was deleted after our write: our new bytes are deleted."""
        for _ in range(_ATTEMPTS):
            if self._version_exists(seg):
                return
            sha, size, version, created = self._put_object(seg.key, encode(rows))
            seg = replace(seg, sha256=sha, bytes=size, version_id=version)
            if not self._repair_written(seg, rows, created):
                if created:
                    self._drop_unnamed(seg, rows)
                return
        raise DependencyUnavailable(_UNAVAILABLE)

    def _repair_written(self, seg: Segment, rows: Sequence[StoredObservation],
                        created: bool) -> bool:
        """`_repair_version` to a version just put; when the item is retired (`_Deleting`, 503)
        a version this call created is deleted first: no item will ever name it, and SQL over
        the bucket would read its rows."""
        try:
            return self._repair_version(seg)
        except _Deleting:
            if created:
                self._drop_unnamed(seg, rows)
            raise

    def _drop_unnamed(self, seg: Segment, rows: Sequence[StoredObservation]) -> None:
        """Delete the version this call created unless a live index item names it (another
        writer adopted it and indexed it); checked again after the delete: an item written
        between the check and the delete gets its rows back (`_keep_named`)."""
        def named() -> bool:
            item = self._indexed(seg)
            return item is not None and "retired" not in item and item.get(
                "version_id", {}).get("S") == seg.version_id

        if named():
            return
        try:
            extra = {} if seg.version_id is None else {"VersionId": seg.version_id}
            self._s3.delete_object(Bucket=self._bucket, Key=seg.key, **extra)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()
        if named():
            self._keep_named(seg, rows)

    def _stage(self, rows: Sequence[StoredObservation], stored_at_ms: int,
               expires_at: int) -> tuple[Segment, bool, int]:
        """The object of rows of one (tenant, deployment, hour), not yet visible; (its index
        item, whether this call created the object, requests made)."""
        first = rows[0]
        tenant, deployment, hour = first.tenant, first.deployment, hour_of(first.arrival_ms)
        seg_id = segment_id(tenant, deployment, hour, (identity(o) for o in rows))
        key = object_key(tenant, deployment, hour, seg_id)
        requests = self._mark_day(tenant, deployment, day_of(hour))
        sha, size, version, created = self._put_object(key, encode(rows))
        arrivals = [o.arrival_ms for o in rows]
        seg = Segment(tenant, deployment, seg_id, key, rows=len(rows), bytes=size,
                      min_arrival_ms=min(arrivals), max_arrival_ms=max(arrivals), sha256=sha,
                      stored_at_ms=stored_at_ms, expires_at=expires_at, version_id=version)
        return seg, created, requests + 1

    def _write_segment(self, rows: Sequence[StoredObservation], stored_at_ms: int,
                       expires_at: int) -> tuple[bool, int]:
        """Store rows of one (tenant, deployment, hour); (whether new, requests made)."""
        seg, created, requests = self._stage(rows, stored_at_ms, expires_at)
        try:
            new = self._put_index(seg)
        except _Deleting:
            if created:  # a version at a retired item's key, named by nothing
                self._drop_unnamed(seg, rows)
            raise
        if not created:
            self._keep_named(seg, rows)
        return new, requests + 1 + (not created)

