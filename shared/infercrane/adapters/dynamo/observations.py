"""The one-item layout observations had before segments (pynamodb): kept for the migration and
for deletions until its items expire. pk = "<tenant>#<deployment>", sk = "<arrival ms:013d>#<id>",
TTL `expires_at`; a window read is one paginated Query, never a Scan.

Writes are conditional (`attribute_not_exists`), in TransactWriteItems of up to 100 actions,
after a keys-only BatchGetItem (100 keys a request) that finds what is stored already, so a
re-sent observation is not written again (not even its expiry) and a re-import costs reads but no
writes. The conditions make the count exact under concurrency: of ten requests storing the same
item, exactly one transaction writes it, and only that request counts it `stored`. A cancelled
transaction has written nothing: an observation whose own condition failed is read and planned
again (what a concurrent writer stored is then found), the others are sent again.

An observation_id the client chose names one observation: its partition holds a claim item
`sk = "ID#<id>"` with the content's fingerprint (and the same TTL), written in the same
transaction as the observation, so neither ever exists without the other and every crash point
is safe (a claim found for the same content, from an interrupted write, is completed by a
re-send; an observation without a claim, stored before claims went with their observations, gets
its claim back). The same id with another fingerprint is refused as a conflict, never stored
twice. Claims sort after every arrival, so window Queries never see them.

All-or-item: a transaction refused for what an item holds (ValidationException, e.g. over the
400 KB item limit) is split in halves until the offending observations are alone; they are
reported in `WriteStats.refused` (with their claims, never written) and everything else is stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pynamodb.exceptions import PynamoDBException

from infercrane.adapters.dynamo.base import (
    DynamoConfig,
    bind,
    parse_query_items_as_json,
    plain_json_batch_requests,
)
from infercrane.adapters.dynamo.observation_items import (
    ObservationItem,
    attributes,
    observation,
    partition,
)
from infercrane.adapters.dynamo.transactions import (
    FAILED,
    MAX_ATTEMPTS,
    REFUSED,
    RETRYABLE,
    WRITTEN,
    Unit,
    write_units,
)
from infercrane.domain.observation import ID_CONFLICT, ITEM_UNSTORABLE, StoredObservation
from infercrane.errors import DependencyUnavailable, InvalidInput
from infercrane.ports.observations import WriteStats

CLAIM = "ID#"  # sorts after every "<arrival ms:013d>#..." key
WRITE_BATCH = 25
READ_BATCH = 100


def claim_key(o: StoredObservation) -> tuple[str, str]:
    return partition(o.tenant, o.deployment), CLAIM + o.observation_id


class _Throttled(Exception):
    pass


class _Refused(Exception):
    """DynamoDB refused the request for what an item holds: retrying it unchanged cannot help."""


class DynamoObservationStore:
    def __init__(self, table_name: str, config: DynamoConfig, retention_days: int,
                 sleep: Callable[[float], None] = time.sleep, base_delay_s: float = 0.05,
                 max_delay_s: float = 2.0, parallel: int = 4):
        self._read = bind(ObservationItem, table_name, config)
        # The batch connection does not retry by itself: this adapter retries and counts.
        self._write = bind(ObservationItem, table_name,
                           DynamoConfig(config.region, config.host, max_retry_attempts=0))
        self._table = table_name
        self._retention_s = retention_days * 86_400
        self._sleep = sleep
        self._base = base_delay_s
        self._cap = max_delay_s
        self._parallel = parallel
        # Tests only: called after each write request that succeeded, to crash between writes.
        self.fault_after_write: Callable[[], None] | None = None

    # -- mapping (observation_items.py) -----------------------------------------------------
    def _attributes(self, o: StoredObservation) -> dict[str, dict[str, Any]]:
        return attributes(o, self._retention_s)

    _observation = staticmethod(observation)

    # -- retries -----------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> None:
        self._sleep(random.uniform(0, min(self._cap, self._base * 2 ** attempt)))

    def _call(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return fn()
        except PynamoDBException as exc:
            code = getattr(exc, "cause_response_code", None)
            if code in RETRYABLE:
                raise _Throttled from exc
            if code == "ValidationException":
                raise _Refused from exc
            raise DependencyUnavailable("The observation store is unavailable.") from exc

    def _until_processed(self, pending: list[Any],
                         send: Callable[[list[Any]], list[Any]]) -> tuple[int, int]:
        """Call `send` until it leaves nothing unprocessed; (calls, retries). A throttled call or
        unprocessed items are retried with backoff; MAX_ATTEMPTS bounds one chunk."""
        calls = retries = 0
        while pending:
            calls += 1
            try:
                pending = send(pending)
            except _Throttled as exc:
                if retries + 1 >= MAX_ATTEMPTS:
                    raise DependencyUnavailable("The observation store is throttling.") from exc
            if pending:
                retries += 1
                if retries >= MAX_ATTEMPTS:
                    raise DependencyUnavailable("The observation store is throttling.")
                self._backoff(retries)
        return calls, retries

    def _delete_chunk(self, chunk: list[dict[str, Any]]) -> None:
        """One BatchWriteItem of up to 25 deletes until fully processed."""
        conn = self._write._get_connection()
        plain_json_batch_requests(conn)

        def send(keys: list[Any]) -> list[Any]:
            response = self._call(lambda: conn.batch_write_item(delete_items=keys))
            left = (response or {}).get("UnprocessedItems", {}).get(self._table, [])
            return [u["DeleteRequest"]["Key"] for u in left]

        try:
            self._until_processed(chunk, send)
        except _Refused as exc:  # keys are bounded by the schema: this is not the item's doing
            raise DependencyUnavailable("The observation store refused a delete.") from exc
        self._wrote()

    def _delete_keys(self, keys: list[dict[str, Any]]) -> None:
        """Delete observations, then their claims: a crash in between leaves claims without
        observations (harmless: a re-send of that content stores it again, other content stays
        refused until the deletion is run again), never an observation without its claim (whose
        id other content could then take). Chunks of 25 go out a few at a time."""
        for group in ([k for k in keys if not k["sk"]["S"].startswith(CLAIM)],
                      [k for k in keys if k["sk"]["S"].startswith(CLAIM)]):
            chunks = [group[i:i + WRITE_BATCH] for i in range(0, len(group), WRITE_BATCH)]
            if len(chunks) <= 1 or self._parallel <= 1:
                for c in chunks:
                    self._delete_chunk(c)
            else:
                with ThreadPoolExecutor(max_workers=min(self._parallel, len(chunks))) as pool:
                    list(pool.map(self._delete_chunk, chunks))

    def _existing_chunk(self, keys: list[tuple[str, str]],
                        ) -> tuple[dict[tuple[str, str], str | None], int]:
        found: dict[tuple[str, str], str | None] = {}
        conn = self._write._get_connection()
        plain_json_batch_requests(conn)

        def send(pending: list[Any]) -> list[Any]:
            response = self._call(lambda: conn.batch_get_item(
                pending, consistent_read=True, attributes_to_get=["pk", "sk", "fingerprint"]))
            for row in response.get("Responses", {}).get(self._table, []):
                fp = row.get("fingerprint")
                found[(row["pk"]["S"], row["sk"]["S"])] = None if fp is None else fp["S"]
            left: list[Any] = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
            return left

        try:
            calls, _ = self._until_processed(
                [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in keys], send)
        except _Refused as exc:  # keys are bounded by the schema: this is not the item's doing
            raise DependencyUnavailable("The observation store refused a read.") from exc
        return found, calls

    def _existing(self, keys: list[tuple[str, str]]) -> tuple[dict[tuple[str, str], str | None], int]:
        """Which of these keys are stored already, with their fingerprint; (keys, BatchGetItem
        calls)."""
        chunks = [keys[i:i + READ_BATCH] for i in range(0, len(keys), READ_BATCH)]
        if len(chunks) <= 1 or self._parallel <= 1:
            results = [self._existing_chunk(c) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self._parallel, len(chunks))) as pool:
                results = list(pool.map(self._existing_chunk, chunks))
        found: dict[tuple[str, str], str | None] = {}
        for r in results:
            found.update(r[0])
        return found, sum(r[1] for r in results)

    def _claim(self, o: StoredObservation) -> dict[str, dict[str, Any]]:
        pk, sk = claim_key(o)
        return {"pk": {"S": pk}, "sk": {"S": sk}, "fingerprint": {"S": str(o.fingerprint)},
                "arrival_ms": {"N": str(o.arrival_ms)},
                "expires_at": {"N": str(o.ingested_at_ms // 1000 + self._retention_s)}}

    # -- port --------------------------------------------------------------------------------
    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        refused: dict[int, str] = {}
        first_of: dict[tuple[str, str], int] = {}  # observation key -> first index holding it
        claims: dict[tuple[str, str], int] = {}  # claim key -> first index claiming the id
        for i, o in enumerate(observations):
            if o.fingerprint is not None:
                claimant = claims.setdefault(claim_key(o), i)
                if observations[claimant].fingerprint != o.fingerprint:
                    refused[i] = ID_CONFLICT
                    continue
            first_of.setdefault((partition(o.tenant, o.deployment), o.sort_key), i)
        pending = [i for i in first_of.values() if i not in refused]
        stored = reads = calls = retries = 0
        for round_ in range(MAX_ATTEMPTS):
            if not pending:
                break
            retries += round_ > 0
            found, r = self._existing([key for i in pending for key in self._keys(observations[i])])
            reads += r
            units: list[tuple[int, bool, Unit]] = []  # (index, stores the observation, unit)
            for i in pending:
                planned = self._plan(observations[i], found)
                if isinstance(planned, str):
                    refused[i] = planned
                elif planned is not None:
                    units.append((i, *planned))
            written = write_units(self._write._get_connection().connection,
                                  [u for _, _, u in units], "The observation store is unavailable.",
                                  sleep=self._sleep, parallel=self._parallel,
                                  after_write=self.fault_after_write)
            calls, retries = calls + written.requests, retries + written.retries
            stored += sum(1 for (_, stores, _), outcome in zip(units, written.outcomes, strict=True)
                          if stores and outcome == WRITTEN)
            refused.update({i: ITEM_UNSTORABLE for (i, _, _), outcome
                            in zip(units, written.outcomes, strict=True) if outcome == REFUSED})
            # A unit whose condition failed is planned again from a fresh read: what made it
            # fail (a concurrent writer) is then in the table.
            pending = [i for (i, _, _), outcome in zip(units, written.outcomes, strict=True)
                       if outcome == FAILED]
        if pending:
            raise DependencyUnavailable("The observation store is throttling.")
        for i, o in enumerate(observations):  # an exact duplicate shares its first's verdict
            first = first_of.get((partition(o.tenant, o.deployment), o.sort_key))
            if i not in refused and first is not None and first in refused \
                    and observations[first].fingerprint == o.fingerprint:
                refused[i] = refused[first]
        return WriteStats(items=stored, requests=calls, retries=retries,
                          skipped=len(observations) - stored - len(refused),
                          read_requests=reads, refused=refused)

    @staticmethod
    def _keys(o: StoredObservation) -> list[tuple[str, str]]:
        key = (partition(o.tenant, o.deployment), o.sort_key)
        return [key] if o.fingerprint is None else [key, claim_key(o)]

    def _plan(self, o: StoredObservation, found: dict[tuple[str, str], str | None],
              ) -> tuple[bool, Unit] | str | None:
        """What storing `o` still takes, given what is stored: (whether it stores the
        observation, its unit of conditional writes), a refusal code, or None (stored already)."""
        key = (partition(o.tenant, o.deployment), o.sort_key)
        if o.fingerprint is None:  # the id is the content's fingerprint: the key says it all
            return None if key in found else (True, Unit(puts=[self._put(self._attributes(o))]))
        claim = claim_key(o)
        if found.get(claim, o.fingerprint) != o.fingerprint \
                or found.get(key, o.fingerprint) not in (o.fingerprint, None):
            return ID_CONFLICT
        if key in found:
            # Stored before claims were written with their observation: the claim is repaired.
            return None if claim in found else (False, Unit(puts=[self._put(self._claim(o))]))
        if claim in found:  # claimed for this very content (an earlier, interrupted write)
            check = {"TableName": self._table, "Key": {"pk": {"S": claim[0]}, "sk": {"S": claim[1]}},
                     "ConditionExpression": "fingerprint = :fp",
                     "ExpressionAttributeValues": {":fp": {"S": o.fingerprint}}}
            return True, Unit(checks=[check], puts=[self._put(self._attributes(o))])
        return True, Unit(puts=[self._put(self._claim(o)), self._put(self._attributes(o))])

    def _put(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"TableName": self._table, "Item": item,
                "ConditionExpression": "attribute_not_exists(sk)"}

    def _wrote(self) -> None:
        if self.fault_after_write is not None:
            self.fault_after_write()

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, page_size: int | None = None) -> Iterator[StoredObservation]:
        if end_ms <= start_ms or (limit is not None and limit <= 0):
            return
        # "$" sorts right after "#": the upper bound takes every id at arrival end_ms - 1.
        condition = self._read.sk.between(f"{max(start_ms, 0):013d}", f"{end_ms - 1:013d}$")
        conn = self._read._get_connection()
        parse_query_items_as_json(conn)
        start_key: dict[str, Any] | None = None
        returned = 0
        try:
            while True:
                page = conn.query(partition(tenant, deployment), range_key_condition=condition,
                                  limit=page_size or limit, exclusive_start_key=start_key)
                for raw in page.get("Items", []):
                    yield self._observation(raw)
                    returned += 1
                    if limit is not None and returned >= limit:
                        return
                start_key = page.get("LastEvaluatedKey")
                if not start_key:
                    return
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        """Observations deleted (their id claims go with them: a deleted id is free again)."""
        return self.delete_page(tenant, deployment, before_ms, None)[0]

    def delete_page(self, tenant: str, deployment: str, before_ms: int | None,
                    limit: int | None) -> tuple[int, bool]:
        """`delete` of at most `limit` items (observations and claims): (observations deleted,
        whether finished). The next call's Query starts where this one's deletes left off."""
        pk = partition(tenant, deployment)
        if before_ms is None:
            condition, claims = None, None
        else:
            condition = self._read.sk < f"{max(before_ms, 0):013d}"
            claims = self._read.sk.startswith(CLAIM)
        keys: list[dict[str, Any]] = []
        try:
            for query in (self._read.query(pk, condition, attributes_to_get=["pk", "sk"],
                                           consistent_read=True),  # deleted keys not met again
                          () if claims is None else self._read.query(
                              pk, claims, attributes_to_get=["pk", "sk"], consistent_read=True,
                              filter_condition=self._read.arrival_ms < before_ms)):
                for item in query:
                    if len(keys) == limit:
                        self._delete_keys(keys)
                        return sum(not k["sk"]["S"].startswith(CLAIM) for k in keys), False
                    keys.append({"pk": {"S": item.pk}, "sk": {"S": item.sk}})
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc
        self._delete_keys(keys)
        return sum(not k["sk"]["S"].startswith(CLAIM) for k in keys), True

    def deployments(self, tenant: str, cursor: str | None, limit: int,
                    ) -> tuple[list[str], str | None]:
        """A page of the tenant's deployments that hold items of this layout (a Scan: the
        layout keeps no list of them; only the migration asks), and the next page's cursor."""
        conn = self._read._get_connection()
        pk, _, sk = (cursor or "").partition("\n")
        if cursor is not None and not (pk.startswith(f"{tenant}#") and sk):
            # Only a key this tenant's Scan returned: any other start is the caller's error (an
            # empty key attribute would be DynamoDB's ValidationException, a 503).
            raise InvalidInput("A cursor is the one a previous page returned.", field="cursor")
        start = None if cursor is None else {"pk": {"S": pk}, "sk": {"S": sk}}
        try:
            page = conn.scan(filter_condition=self._read.pk.startswith(f"{tenant}#"),
                             attributes_to_get=["pk", "sk"], limit=limit,
                             exclusive_start_key=start)  # type: ignore[arg-type]  # a key
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc
        found = set()
        for item in page.get("Items", []):
            parts = item["pk"]["S"].split("#")
            if len(parts) == 2:  # segment index items' keys hold a day after the deployment
                found.add(parts[1])
        last = page.get("LastEvaluatedKey")
        return sorted(found), None if not last else f"{last['pk']['S']}\n{last['sk']['S']}"

    def missing(self, rows: Sequence[StoredObservation]) -> list[StoredObservation]:
        """Those of `rows` no longer stored: keys-only consistent BatchGetItem."""
        found, _ = self._existing([(partition(o.tenant, o.deployment), o.sort_key) for o in rows])
        return [o for o in rows if (partition(o.tenant, o.deployment), o.sort_key) not in found]

    def delete_import(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                      id_prefix: str) -> int:
        """One import's observations (a Query of its arrival range, filtered by id prefix) and
        their id claims (one begins_with Query: the prefix frees every id of the import)."""
        if end_ms <= start_ms:
            return 0
        pk = partition(tenant, deployment)
        condition = self._read.sk.between(f"{max(start_ms, 0):013d}", f"{end_ms - 1:013d}$")
        keys: list[dict[str, Any]] = []
        try:
            for item in self._read.query(pk, condition, attributes_to_get=["pk", "sk"]):
                if item.sk.split("#", 1)[1].startswith(id_prefix):
                    keys.append({"pk": {"S": item.pk}, "sk": {"S": item.sk}})
            count = len(keys)
            for item in self._read.query(pk, self._read.sk.startswith(CLAIM + id_prefix),
                                         attributes_to_get=["pk", "sk"]):
                keys.append({"pk": {"S": item.pk}, "sk": {"S": item.sk}})
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc
        self._delete_keys(keys)
        return count
