"""DynamoDB adapter for capacity intelligence (CapacityTable: pk/sk + overloaded GSI `gsi1`).

Item layouts (every table key begins with the tenant):

| item | pk | sk | gsi1pk | gsi1sk |
|---|---|---|---|---|
| attempt | `<t>#ATTEMPT#<attempt id>` | `A` | `<t>#HOUR#<hour>` | `<attempt id>` |
| dirty tenant-hour | `<t>#DIRTY` | `<hour>` | `CAPACITY#DIRTY` | `<marked ms:013d>#<t>#<hour>` |
| hour rollup (part) | `<t>#ROLLUP` | `<hour>#<part:03d>` | `CLASSIFIER#<version>` | `<t>#<hour>#<part:03d>` |
| day rollup (part) | `<t>#DAY` | `<day>#<part:03d>` | - | - |

`<hour>` is `YYYY-MM-DDTHH` (UTC) of started_at, `<day>` `YYYY-MM-DD`. A dirty mark with
`rolled` set waits for its day to close (`dirty_at_ms` = the day's end). Day rollups carry no gsi1
key: they are rebuilt from their hours, never listed by classifier version. Reads:
- idempotency: BatchGetItem on the attempt keys (the attempt id is the key, so an attempt is
  counted once whatever its payload), then the new ones put `attribute_not_exists` in
  TransactWriteItems of 100 (`put_attempts` counts what it stored);
- an hour's attempts: one Query on gsi1 `<t>#HOUR#<hour>`;
- a report: one Query on `<t>#DAY` between the window's whole days, one Query on `<t>#ROLLUP`
  for each run of hours no day rollup answers (the window's partial days, the open day, days with
  a mark), plus one Query on `<t>#DIRTY` for the tail;
- replacing rollups (`put_rollups`): per tenant one keys-only Query on `<t>#ROLLUP` over the
  hours' range, then for each hour its parts, stale-part deletions and a check of its mark's
  token in one TransactWriteItems (hours packed 100 actions a request; without marks, as the
  benches load rollups, BatchWriteItem of 25 items);
- the aggregator's work list: Query on gsi1 `CAPACITY#DIRTY` (sparse: only markers carry it);
  re-classification: Query on gsi1 `CLASSIFIER#<old version>`.
The two cross-tenant gsi1 partitions are work lists of pointers (tenant, hour), not tenant data;
their sort keys carry the tenant. Nothing here ever Scans.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pynamodb.exceptions import DeleteError, PynamoDBException

from infercrane.adapters.dynamo.base import DynamoConfig, bind
from infercrane.adapters.dynamo.capacity_items import (
    CapacityItem,
    Gsi1,
    attempt_item,
    stored_attempt,
)
from infercrane.adapters.dynamo.transactions import REFUSED, WRITTEN, Unit, write_units
from infercrane.domain.capacity import (
    DayRollup,
    DirtyMark,
    HourRollup,
    StoredAttempt,
    day_from_key,
    day_key,
    hour_from_key,
    hour_key,
    new_token,
)
from infercrane.errors import DependencyUnavailable, InvalidInput

log = logging.getLogger(__name__)

DIRTY_PK = "CAPACITY#DIRTY"
MAX_PART_BYTES = 300_000  # well under DynamoDB's 400 KB item limit
_UNAVAILABLE = "The capacity store is unavailable."


def _chunks(docs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    parts: list[list[dict[str, Any]]] = [[]]
    size = 0
    for d in docs:
        n = len(json.dumps(d, separators=(",", ":")))
        if parts[-1] and size + n > MAX_PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(d)
        size += n + 1
    return parts


class DynamoCapacityStore:
    def __init__(self, table_name: str, config: DynamoConfig):
        self._item = bind(CapacityItem, table_name, config)

    # -- attempts -------------------------------------------------------------------------------
    def existing_attempt_ids(self, tenant: str, attempt_ids: Sequence[str]) -> set[str]:
        keys = [(f"{tenant}#ATTEMPT#{a}", "A") for a in dict.fromkeys(attempt_ids)]
        try:
            return {i.attempt_id or "" for i in self._item.batch_get(
                keys, attributes_to_get=["pk", "sk", "attempt_id"])}
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc

    def put_attempts(self, attempts: Sequence[StoredAttempt]) -> int:
        """Each attempt put only if its id is not stored (TransactWriteItems, 100 a request): of
        concurrent first writes of one id exactly one stores it (its payload is kept, the
        others' ignored, as a re-send's is), and each call counts only what it stored."""
        table = self._item.Meta.table_name
        units = [Unit(puts=[{"TableName": table, "Item": attempt_item(self._item, a).serialize(),
                             "ConditionExpression": "attribute_not_exists(pk)"}])
                 for a in attempts]
        outcomes = write_units(self._item._get_connection().connection, units,
                               _UNAVAILABLE).outcomes
        if REFUSED in outcomes:
            # Attempts are the caller's content: DynamoDB refusing one (ValidationException) is
            # the same refusal at every retry, a 422 like every other store's, never a 503.
            raise InvalidInput("The store cannot hold this content.", code="unstorable_content")
        return outcomes.count(WRITTEN)

    def update_classifications(self, attempts: Sequence[StoredAttempt]) -> None:
        self._write(attempt_item(self._item, a) for a in attempts)

    def attempts_in_hour(self, tenant: str, hour: int) -> Iterator[StoredAttempt]:
        try:
            for i in self._item.gsi1.query(f"{tenant}#HOUR#{hour_key(hour)}"):
                yield stored_attempt(i)
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc

    # -- dirty tenant-hours ---------------------------------------------------------------------
    def mark_dirty(self, tenant: str, hours: Iterable[int], now_ms: int) -> None:
        self._write(self._item(
            f"{tenant}#DIRTY", hour_key(h), kind="dirty", tenant=tenant, token=new_token(),
            dirty_at_ms=now_ms, gsi1pk=DIRTY_PK, gsi1sk=f"{now_ms:013d}#{tenant}#{hour_key(h)}")
            for h in hours)

    def _mark(self, i: CapacityItem) -> DirtyMark:
        return DirtyMark(i.tenant, hour_from_key(i.sk), i.token or "", int(i.dirty_at_ms or 0),
                         rolled=bool(i.rolled))

    def dirty_hours(self, tenant: str, start_hour: int, end_hour: int) -> list[DirtyMark]:
        try:
            return [self._mark(i) for i in self._item.query(
                f"{tenant}#DIRTY",
                self._item.sk.between(hour_key(start_hour), hour_key(end_hour - 1)),
                consistent_read=True)]
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc

    def pending(self, before_ms: int, limit: int) -> list[DirtyMark]:
        marks: list[DirtyMark] = []
        try:
            for i in self._item.gsi1.query(DIRTY_PK, Gsi1.gsi1sk < f"{before_ms + 1:013d}",
                                           limit=limit):
                try:
                    marks.append(self._mark(i))
                except (ValueError, TypeError):
                    # A mark that does not parse is one tenant's problem: skip it, by key.
                    log.warning("aggregate: unreadable dirty mark %s/%s skipped", i.pk, i.sk)
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return marks

    def clear_dirty(self, mark: DirtyMark) -> bool:
        item = self._item(f"{mark.tenant}#DIRTY", hour_key(mark.hour))
        try:
            item.delete(condition=self._item.token == mark.token)
        except DeleteError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                return False  # re-marked meanwhile: the next run rolls it up again
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return True

    def reschedule(self, mark: DirtyMark, due_ms: int) -> bool:
        hk = hour_key(mark.hour)
        item = self._item(
            f"{mark.tenant}#DIRTY", hk, kind="dirty", tenant=mark.tenant, token=new_token(),
            dirty_at_ms=due_ms, rolled=True, gsi1pk=DIRTY_PK,
            gsi1sk=f"{due_ms:013d}#{mark.tenant}#{hk}")
        try:
            item.save(condition=self._item.token == mark.token)
        except PynamoDBException as exc:
            if getattr(exc, "cause_response_code", None) == "ConditionalCheckFailedException":
                return False  # re-marked meanwhile: the newer mark stays
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return True

    # -- rollups --------------------------------------------------------------------------------
    def _rollup_items(self, rollup: HourRollup, token: str | None = None) -> list[CapacityItem]:
        """The hour's parts; `token`, the mark it was built from, versions it for day checks."""
        hk = hour_key(rollup.hour)
        parts = _chunks(rollup.group_docs())
        return [self._item(
            f"{rollup.tenant}#ROLLUP", f"{hk}#{n:03d}", kind="rollup", tenant=rollup.tenant,
            hour=hk, part=n, parts=len(parts), classifier_version=rollup.classifier_version,
            token=token,
            groups=json.dumps(docs, separators=(",", ":")),
            gsi1pk=f"CLASSIFIER#{rollup.classifier_version}",
            gsi1sk=f"{rollup.tenant}#{hk}#{n:03d}") for n, docs in enumerate(parts)]

    def put_rollup(self, rollup: HourRollup, mark: DirtyMark | None = None) -> bool:
        return self.put_rollups([rollup], None if mark is None else [mark])[0]

    def put_rollups(self, rollups: Sequence[HourRollup],
                    marks: Sequence[DirtyMark] | None = None) -> list[bool]:
        """Replace the rollups of many tenant-hours: per tenant one keys-only Query over the
        hours' range finds the parts already stored; every new part is saved and the parts a
        smaller rollup no longer has are deleted. Without marks, one batched write (25 items a
        request); with marks (one per rollup), each rollup goes in a transaction with a check
        that its mark still holds the token read, and only those are written (`_guarded`)."""
        if marks is None:
            return self._replace_parts("ROLLUP", [(r.tenant, hour_key(r.hour),
                                                   self._rollup_items(r)) for r in rollups])
        return self._replace_parts(
            "ROLLUP", [(r.tenant, hour_key(r.hour), self._rollup_items(r, m.token))
                       for r, m in zip(rollups, marks, strict=True)],
            [[self._mark_check(m)] for m in marks])

    def _mark_check(self, m: DirtyMark) -> dict[str, Any]:
        """A transaction's check that the mark still holds the token read."""
        return {"TableName": self._item.Meta.table_name,
                "Key": {"pk": {"S": f"{m.tenant}#DIRTY"}, "sk": {"S": hour_key(m.hour)}},
                "ConditionExpression": "#t = :t", "ExpressionAttributeNames": {"#t": "token"},
                "ExpressionAttributeValues": {":t": {"S": m.token}}}

    def _hour_check(self, h: HourRollup) -> dict[str, Any]:
        """A transaction's check that the hour rollup is still the one read (its first part's
        token: every rewrite writes it)."""
        check: dict[str, Any] = {
            "TableName": self._item.Meta.table_name,
            "Key": {"pk": {"S": f"{h.tenant}#ROLLUP"}, "sk": {"S": f"{hour_key(h.hour)}#000"}},
            "ExpressionAttributeNames": {"#t": "token"}}
        if h.token is None:
            check["ConditionExpression"] = "attribute_not_exists(#t)"
        else:
            check["ConditionExpression"] = "#t = :t"
            check["ExpressionAttributeValues"] = {":t": {"S": h.token}}
        return check

    def _replace_parts(self, kind: str, rollups: list[tuple[str, str, list[CapacityItem]]],
                       guards: list[list[dict[str, Any]]] | None = None) -> list[bool]:
        """Store each (tenant, period key, part items) under `<tenant>#<kind>`, deleting the
        parts beyond the new count that an earlier, larger rollup of the period left."""
        by_tenant: dict[str, list[tuple[str, list[CapacityItem]]]] = {}
        for tenant, key, items in rollups:
            by_tenant.setdefault(tenant, []).append((key, items))
        stale: dict[tuple[str, str], list[str]] = {}
        try:
            for tenant, group in by_tenant.items():
                keys = {key for key, _ in group}
                old: dict[str, list[str]] = {}
                for i in self._item.query(f"{tenant}#{kind}", self._item.sk.between(
                        f"{min(keys)}#", f"{max(keys)}#~"), attributes_to_get=["pk", "sk"]):
                    key = i.sk.split("#", 1)[0]
                    if key in keys:
                        old.setdefault(key, []).append(i.sk)
                for key, items in group:
                    stale[(tenant, key)] = old.get(key, [])[len(items):]
            if guards is not None:
                return self._guarded(kind, rollups, guards, stale)
            with self._item.batch_write() as batch:
                for tenant, key, items in rollups:
                    for item in items:
                        batch.save(item)
                    for sk in stale[(tenant, key)]:
                        batch.delete(self._item(f"{tenant}#{kind}", sk))
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return [True] * len(rollups)

    def _guarded(self, kind: str, rollups: list[tuple[str, str, list[CapacityItem]]],
                 guards: list[list[dict[str, Any]]], stale: dict[tuple[str, str], list[str]],
                 ) -> list[bool]:
        """Each rollup's parts, its stale parts' deletions and its checks (of the marks and
        hours it was built from) in one transaction: a run that read a mark since replaced by a
        newer attempt (or cleared by a newer run), or an hour since rewritten, writes nothing
        over the newer run's rollup. Which were written."""
        table = self._item.Meta.table_name
        units = [Unit(
            checks=checks,
            puts=[{"TableName": table, "Item": item.serialize()} for item in items],
            deletes=[{"TableName": table, "Key": {"pk": {"S": f"{tenant}#{kind}"}, "sk": {"S": sk}}}
                     for sk in stale[(tenant, key)]])
            for (tenant, key, items), checks in zip(rollups, guards, strict=True)]
        return [outcome == WRITTEN for outcome in self._write_units(units)]

    def _write_units(self, units: list[Unit]) -> list[str]:
        """Each unit's outcome; an item DynamoDB refuses (our own item, bounded by the schema)
        is an error of the store, as it was for the batched writes."""
        outcomes = write_units(self._item._get_connection().connection, units,
                               _UNAVAILABLE).outcomes
        if REFUSED in outcomes:
            raise DependencyUnavailable("The capacity store refused an item.")
        return outcomes

    def rollups(self, tenant: str, start_hour: int, end_hour: int) -> Iterator[HourRollup]:
        for i, docs in self._parts(tenant, "ROLLUP", hour_key(start_hour), hour_key(end_hour - 1)):
            yield HourRollup.from_group_docs(tenant, hour_from_key(i.hour or ""),
                                             i.classifier_version or "", docs, i.token)

    def _parts(self, tenant: str, kind: str, first: str, last: str
               ) -> Iterator[tuple[CapacityItem, list[dict[str, Any]]]]:
        """Every part stored under `<tenant>#<kind>` from period key `first` to `last`, with
        its groups decoded: one Query."""
        try:
            for i in self._item.query(f"{tenant}#{kind}",
                                      self._item.sk.between(f"{first}#", f"{last}#~")):
                yield i, json.loads(i.groups or "[]")
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc

    def _day_items(self, rollup: DayRollup) -> list[CapacityItem]:
        dk = day_key(rollup.day)
        parts = _chunks(rollup.group_docs())
        return [self._item(
            f"{rollup.tenant}#DAY", f"{dk}#{n:03d}", kind="day", tenant=rollup.tenant, day=dk,
            part=n, parts=len(parts), classifier_version=rollup.classifier_version,
            groups=json.dumps(docs, separators=(",", ":"))) for n, docs in enumerate(parts)]

    def put_day_rollups(self, rollups: Sequence[DayRollup],
                        marks: Sequence[Sequence[DirtyMark]] | None = None,
                        hours: Sequence[Sequence[HourRollup]] | None = None) -> list[bool]:
        """Replace day rollups as `put_rollups` replaces hour rollups (parts a smaller day no
        longer has are deleted); with marks and hours (per rollup, what it was built from), only
        while each mark holds the token read and each hour is the rollup read."""
        items = [(r.tenant, day_key(r.day), self._day_items(r)) for r in rollups]
        if marks is None and hours is None:
            return self._replace_parts("DAY", items)
        guards = []
        for n in range(len(rollups)):
            read = {h.hour: h for h in (hours[n] if hours is not None else [])}
            guards.append([self._mark_check(m) for m in (marks[n] if marks is not None else [])]
                          + [self._hour_check(h) for h in read.values()])
        return self._replace_parts("DAY", items, guards)

    def day_rollups(self, tenant: str, start_day: int, end_day: int) -> Iterator[DayRollup]:
        for i, docs in self._parts(tenant, "DAY", day_key(start_day), day_key(end_day - 1)):
            yield DayRollup.from_group_docs(tenant, day_from_key(i.day or ""),
                                            i.classifier_version or "", docs)

    def rollups_of_version(self, version: str, limit: int) -> list[tuple[str, int]]:
        out: dict[tuple[str, int], None] = {}
        try:
            for i in self._item.gsi1.query(f"CLASSIFIER#{version}", limit=limit):
                tenant, hk, _part = (i.gsi1sk or "").rsplit("#", 2)
                out[(tenant, hour_from_key(hk))] = None
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
        return list(out)

    # -- helpers --------------------------------------------------------------------------------
    def _write(self, items: Iterable[CapacityItem]) -> None:
        try:
            with self._item.batch_write() as batch:
                for item in items:
                    batch.save(item)
        except PynamoDBException as exc:
            raise DependencyUnavailable(_UNAVAILABLE) from exc
