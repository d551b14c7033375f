"""Deleting rows from segments, safe against crashes and against concurrent deletions.

A segment wholly deleted: its object version, then its index item, on condition the item is not
retired and still names that version (else a re-send named a new one: the walk goes back to it).
A segment keeping some rows (a cut through it, other imports' rows): the kept rows' object
(invisible without an index item), then ONE transaction that retires the old index item (condition:
there, not retired, naming the version read) and puts the kept rows' index item, then the old
object version, then the old index item. The transaction is the claim: of two deletions that read
the same segment only one replaces it; the other's condition fails, it deletes the object it
created unless an index item names it (two deletions making the same cut share one object: one
created it, the other adopted it and may have won; `_drop_unnamed`), and walks the index again from
that segment on, where it finds the survivor and cuts it too. A retired item, or one whose object
is gone, also sends the walk back there: someone's kept rows may be in a segment the walk has
passed.

Crash points: before the transaction nothing is visible but an object of kept rows (adopted by
the re-run: same rows, same key); after it, the old segment is retired (reads skip it: the claim
is when the deletion takes effect) and removed by whoever meets it next. A deletion answers once
every segment it met is removed or cut, so no deleted row stays visible after it answered, and
no kept row is ever invisible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.adapters.segments.layout import Segment, decode, order
from infercrane.adapters.segments.writing import SegmentWrites
from infercrane.domain.observation import StoredObservation
from infercrane.errors import DependencyUnavailable

_UNAVAILABLE = "The observation store is unavailable."
_CONDITION = "ConditionalCheckFailedException"
_CANCELLED = "TransactionCanceledException"
_NOT_RETIRED = "attribute_not_exists(retired)"
Drop = Callable[[StoredObservation], bool]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _names(seg: Segment) -> tuple[str, dict[str, Any]]:
    """The condition (and its values) that the index item names `seg`'s version."""
    if seg.version_id is None:
        return "attribute_not_exists(version_id)", {}
    return "version_id = :v", {":v": {"S": seg.version_id}}


class SegmentDeletion(SegmentWrites):
    """The deletion half of `SegmentObservationStore` (which provides what is declared here)."""

    def fetch(self, seg: Segment) -> bytes | None:
        raise NotImplementedError

    def segments(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                 expired: bool = False, retired: bool = False) -> Iterator[Segment]:
        raise NotImplementedError

    def _delete_object(self, seg: Segment) -> None:
        extra = {} if seg.version_id is None else {"VersionId": seg.version_id}
        try:
            self._s3.delete_object(Bucket=self._bucket, Key=seg.key, **extra)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()

    def _delete_index(self, seg: Segment, live: bool = False) -> bool:
        """Delete `seg`'s index item if it still names the version just deleted (and, when
        `live`, is not retired); False when not: a re-send named a new version, or another
        deletion retired it, and the walk goes back to meet it again."""
        condition, values = _names(seg)
        if live:
            condition += f" AND {_NOT_RETIRED}"
        extra: dict[str, Any] = {"ConditionExpression": condition}
        if values:
            extra["ExpressionAttributeValues"] = values
        try:
            self._ddb.delete_item(TableName=self._table,
                                  Key={"pk": {"S": seg.pk}, "sk": {"S": seg.sk}}, **extra)
        except ClientError as exc:
            if _code(exc) == _CONDITION:
                return False
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()
        return True

    def _retire(self, old: Segment, new: Segment) -> bool | None:
        """Retire `old` and make `new` visible, in one transaction: True; False when `new`'s
        item was there already (only `old` retired); None when `old` is retired, gone (another
        deletion replaced or removed it first) or names another version than the one read (a
        re-send repaired it after our page: retiring it would leave the new version's bytes
        once our item delete, conditional on the old one, failed; the walk meets it again)."""
        names, values = _names(old)
        retire = {"TableName": self._table, "Key": {"pk": {"S": old.pk}, "sk": {"S": old.sk}},
                  "UpdateExpression": "SET retired = :t",
                  "ConditionExpression": f"attribute_exists(sk) AND {_NOT_RETIRED} AND {names}",
                  "ExpressionAttributeValues": {":t": {"BOOL": True}, **values}}
        put = {"TableName": self._table, "Item": new.item(),
               "ConditionExpression": "attribute_not_exists(sk)"}
        try:
            self._ddb.transact_write_items(TransactItems=[{"Update": retire}, {"Put": put}])
        except ClientError as exc:
            if _code(exc) != _CANCELLED:
                raise DependencyUnavailable(_UNAVAILABLE) from exc
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons[:1] == ["ConditionalCheckFailed"]:
                return None
            if reasons[1:2] != ["ConditionalCheckFailed"]:
                raise DependencyUnavailable(_UNAVAILABLE) from exc  # a conflict: transient
            # The kept rows are a segment already indexed (the same rows stored by a batch):
            # only the old item is retired.
            try:
                self._ddb.update_item(**retire)
            except ClientError as again:
                if _code(again) == _CONDITION:
                    return None
                raise DependencyUnavailable(_UNAVAILABLE) from again
            except BotoCoreError as again:
                raise DependencyUnavailable(_UNAVAILABLE) from again
            self._wrote()
            return False
        except BotoCoreError as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        self._wrote()
        return True

    def _cut(self, seg: Segment, drop: Drop | None) -> tuple[int, bool]:
        """Remove the rows `drop` names (all when None) from a segment: (rows removed, whether
        the walk must go back to this segment's first arrival)."""
        if seg.retired:  # its kept rows are in a visible segment: it only has to go
            self._delete_object(seg)
            self._delete_index(seg)
            return 0, True
        if drop is None:
            self._delete_object(seg)
            # Up to `rows`: a row re-sent in another batch is counted in each of its segments.
            return (seg.rows, False) if self._delete_index(seg, live=True) else (0, True)
        body = self.fetch(seg)
        if body is None:  # removed, or retired and its object gone, while we walked (or expired)
            self._delete_index(seg, live=True)
            return 0, True
        rows = decode(seg.tenant, seg.deployment, body)
        kept = sorted((o for o in rows if not drop(o)), key=order)
        if len(kept) == len(rows):
            return 0, False
        if not kept:
            _, back = self._cut(seg, None)
            return (0, True) if back else (len(rows), False)
        # The kept rows keep their ingest times (what reads rank copies of one id by) and their
        # expiry: a rewrite extends no retention.
        new, created, _ = self._stage(kept, seg.stored_at_ms, seg.expires_at)
        claim = self._retire(seg, new)
        if claim is None:
            if created:
                self._drop_unnamed(new, kept)
            return 0, True
        if not created:  # adopted: its creator may have deleted it since (writing.py)
            if not claim:  # the survivor's item was there: it may name another, gone version
                self._repair_version(new)
            self._keep_named(new, kept)
        elif not claim and not self._repair_written(new, kept, created):  # the item there
            self._drop_unnamed(new, kept)  # named another version (its bytes deleted, or 412)
        self._delete_object(seg)
        self._delete_index(seg)  # retired by us: no re-send can name another version (writing.py)
        return len(rows) - len(kept), False

    def _walk(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              choose: Callable[[Segment], Drop | None],
              limit: int | None = None) -> tuple[int, bool]:
        """Cut `choose(seg)` from every segment in range, streaming the index (never listed
        whole first); (rows deleted, whether finished: False when `limit` segments were met
        first)."""
        deleted = met = 0
        low = start_ms
        while True:
            again = None
            for seg in self.segments(tenant, deployment, low, end_ms, expired=True,
                                    retired=True):
                if met == limit:
                    return deleted, False
                met += 1
                removed, back = self._cut(seg, choose(seg))
                deleted += removed
                if back:
                    again = max(low, seg.min_arrival_ms)
                    break
            if again is None:
                return deleted, True
            low = again
