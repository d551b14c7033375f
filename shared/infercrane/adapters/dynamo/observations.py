"""DynamoDB adapter for observations (pynamodb).

Layout (fixed, see template.yaml): pk = "<tenant>#<deployment>", sk = "<arrival ms:013d>#<id>",
TTL attribute `expires_at` = ingest time + retention. A window read is one paginated Query on the
partition with a key condition, never a Scan.

Writes are BatchWriteItem, 25 items a request. Unprocessed items and throttling are retried here
with capped exponential backoff and full jitter (the connection itself does not retry, so every
request is counted in `WriteStats`). Idempotence: keys already in the table are found first with
BatchGetItem (keys only, 100 a request) and are not written again, so a re-sent observation
changes nothing, not even its expiry, and a re-import costs reads but no writes.

An observation_id the client chose names one observation: next to the observation, its partition
holds a claim item `sk = "ID#<id>"` with the content's fingerprint (and the same TTL). The claim is
read with the same BatchGetItem; the same id with another fingerprint is refused as a conflict,
never stored twice. Claims sort after every arrival, so window Queries never see them.

All-or-item: a BatchWriteItem refused for what an item holds (ValidationException, e.g. over the
400 KB item limit) is split in halves until the offending items are alone; they are reported in
`WriteStats.refused` and everything else is stored. Claims go out with their observations (one
round of requests); either landing alone heals on re-send, and the claim of an observation the
store refused is deleted again, so an unstorable item never keeps its id.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pynamodb.attributes import BooleanAttribute, ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PynamoDBException
from pynamodb.models import Model

from infercrane.adapters.dynamo.base import (
    DynamoConfig,
    bind,
    parse_query_items_as_json,
    plain_json_batch_requests,
)
from infercrane.domain.observation import ID_CONFLICT, ITEM_UNSTORABLE, StoredObservation
from infercrane.errors import DependencyUnavailable
from infercrane.ports.observations import WriteStats

CLAIM = "ID#"  # sorts after every "<arrival ms:013d>#..." key
WRITE_BATCH = 25
READ_BATCH = 100
MAX_ATTEMPTS = 8
RETRYABLE = {None, "ProvisionedThroughputExceededException", "ThrottlingException",
             "RequestLimitExceeded", "InternalServerError", "ServiceUnavailable"}


class ObservationItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    tenant = UnicodeAttribute()
    deployment = UnicodeAttribute()
    observation_id = UnicodeAttribute()
    arrival_ms = NumberAttribute()
    input_tokens = NumberAttribute()
    output_tokens = NumberAttribute()
    latency_ms = NumberAttribute()
    outcome = UnicodeAttribute()
    streaming = BooleanAttribute()
    sampling_rate = NumberAttribute()
    source = UnicodeAttribute()
    ingested_at_ms = NumberAttribute()
    expires_at = NumberAttribute()  # epoch seconds: DynamoDB TTL
    revision = UnicodeAttribute(null=True)
    cached_input_tokens = NumberAttribute(null=True)
    ttft_ms = NumberAttribute(null=True)
    provenance = UnicodeAttribute(null=True)
    timing_source = UnicodeAttribute()
    timing_model = UnicodeAttribute(null=True)
    session_id = UnicodeAttribute(null=True)
    parent_session_id = UnicodeAttribute(null=True)
    shared_prefix_id = UnicodeAttribute(null=True)
    prefix_block_ids = ListAttribute(of=UnicodeAttribute, null=True)
    prefix_block_size = NumberAttribute(null=True)
    key_version = UnicodeAttribute(null=True)
    fingerprint = UnicodeAttribute(null=True)  # claims and client-named observations


_OPTIONAL_STRINGS = ("revision", "provenance", "timing_model", "session_id", "parent_session_id",
                     "shared_prefix_id", "key_version", "fingerprint")
_OPTIONAL_NUMBERS = ("cached_input_tokens", "ttft_ms", "prefix_block_size")


def _number(text: str) -> int | float:
    """A stored number as `json.loads` reads it (int when integral text), at int()'s cost."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def partition(tenant: str, deployment: str) -> str:
    return f"{tenant}#{deployment}"


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

    # -- mapping -----------------------------------------------------------------------------
    # Items are mapped to and from DynamoDB's attribute values directly: building a pynamodb
    # model per item only to serialize it was most of the capture path's CPU and of a trace
    # build's time (make bench). The model above stays the schema and the connection.
    def _attributes(self, o: StoredObservation) -> dict[str, dict[str, Any]]:
        # Fields read from the instance dict and numbers written by `str` in place (no call per
        # attribute; `str` of an int or a float is the text pynamodb's NumberAttribute writes, a
        # float's str being its repr): this mapping was a quarter of capture's CPU per
        # observation (make bench, group `capture`). tests/unit/test_observation_item_mapping.py
        # holds it to pynamodb's own serialization of the model above.
        f = o.__dict__
        item: dict[str, dict[str, Any]] = {
            "pk": {"S": partition(f["tenant"], f["deployment"])}, "sk": {"S": o.sort_key},
            "tenant": {"S": f["tenant"]}, "deployment": {"S": f["deployment"]},
            "observation_id": {"S": f["observation_id"]}, "arrival_ms": {"N": str(f["arrival_ms"])},
            "input_tokens": {"N": str(f["input_tokens"])},
            "output_tokens": {"N": str(f["output_tokens"])},
            "latency_ms": {"N": str(f["latency_ms"])}, "outcome": {"S": f["outcome"]},
            "streaming": {"BOOL": f["streaming"]}, "sampling_rate": {"N": str(f["sampling_rate"])},
            "source": {"S": f["source"]}, "ingested_at_ms": {"N": str(f["ingested_at_ms"])},
            "expires_at": {"N": str(f["ingested_at_ms"] // 1000 + self._retention_s)},
            "timing_source": {"S": f["timing_source"]},
        }
        for name in _OPTIONAL_STRINGS:
            value = f[name]
            if value is not None:
                item[name] = {"S": value}
        for name in _OPTIONAL_NUMBERS:
            value = f[name]
            if value is not None:
                item[name] = {"N": str(value)}
        blocks = f["prefix_block_ids"]
        if blocks is not None:
            item["prefix_block_ids"] = {"L": [{"S": b} for b in blocks]}
        return item

    @staticmethod
    def _observation(raw: dict[str, dict[str, Any]]) -> StoredObservation:
        def s(name: str) -> Any:
            value = raw.get(name)
            return None if value is None else value["S"]

        def n(name: str) -> Any:
            value = raw.get(name)
            return None if value is None else _number(value["N"])

        blocks = raw.get("prefix_block_ids")
        cached, ttft, block_size = n("cached_input_tokens"), n("ttft_ms"), n("prefix_block_size")
        return StoredObservation(
            tenant=s("tenant"), deployment=s("deployment"), observation_id=s("observation_id"),
            arrival_ms=int(n("arrival_ms")), input_tokens=int(n("input_tokens")),
            output_tokens=int(n("output_tokens")), latency_ms=float(n("latency_ms")),
            outcome=s("outcome"), streaming=bool(raw["streaming"]["BOOL"]),
            sampling_rate=float(n("sampling_rate")), source=s("source"),
            ingested_at_ms=int(n("ingested_at_ms")), revision=s("revision"),
            cached_input_tokens=None if cached is None else int(cached),
            ttft_ms=None if ttft is None else float(ttft), provenance=s("provenance"),
            timing_source=s("timing_source"), timing_model=s("timing_model"),
            session_id=s("session_id"), parent_session_id=s("parent_session_id"),
            shared_prefix_id=s("shared_prefix_id"),
            prefix_block_ids=None if blocks is None else tuple(b["S"] for b in blocks["L"]),
            prefix_block_size=None if block_size is None else int(block_size),
            key_version=s("key_version"), fingerprint=s("fingerprint"),
        )

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

    def _write_chunk(self, chunk: list[dict[str, Any]], kind: str,
                     ) -> tuple[int, int, list[dict[str, Any]]]:
        """One chunk of up to 25 requests until fully processed; (calls, retries, refused).

        A chunk refused for its content is split in halves until each refused item is alone;
        the halves that are fine are written (puts are idempotent, so re-writing what a
        half-applied call stored changes nothing)."""
        conn = self._write._get_connection()
        plain_json_batch_requests(conn)
        key, field = ("PutRequest", "Item") if kind == "put" else ("DeleteRequest", "Key")

        def send(items: list[Any]) -> list[Any]:
            response = self._call(lambda: conn.batch_write_item(put_items=items) if kind == "put"
                                  else conn.batch_write_item(delete_items=items))
            left = (response or {}).get("UnprocessedItems", {}).get(self._table, [])
            return [u[key][field] for u in left]

        try:
            calls, retries = self._until_processed(chunk, send)
            return calls, retries, []
        except _Refused:
            if len(chunk) == 1:
                return 1, 0, chunk
            half = len(chunk) // 2
            a, b = self._write_chunk(chunk[:half], kind), self._write_chunk(chunk[half:], kind)
            return 1 + a[0] + b[0], a[1] + b[1], a[2] + b[2]

    def _batch_write(self, requests: list[dict[str, Any]], kind: str,
                     ) -> tuple[int, int, list[dict[str, Any]]]:
        """BatchWriteItem of `requests` ({attr: {type: value}}), 25 a call; (calls, retries,
        requests refused for their content).

        Chunks go out a few at a time: a 500-item batch is 20 requests, and waiting for each in
        turn would make the network round trip, not DynamoDB, the limit."""
        chunks = [requests[i:i + WRITE_BATCH] for i in range(0, len(requests), WRITE_BATCH)]
        if len(chunks) <= 1 or self._parallel <= 1:
            results = [self._write_chunk(c, kind) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self._parallel, len(chunks))) as pool:
                results = list(pool.map(lambda c: self._write_chunk(c, kind), chunks))
        return (sum(r[0] for r in results), sum(r[1] for r in results),
                [item for r in results for item in r[2]])

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
        found, reads = self._existing([*first_of, *claims])
        for key, i in claims.items():
            if key in found and found[key] != observations[i].fingerprint:
                refused[i] = ID_CONFLICT
        new = {key: i for key, i in first_of.items() if key not in found and i not in refused}
        unclaimed = {key: i for key, i in claims.items() if key not in found and i not in refused}
        # Observations and their claims in one round of requests. Either may land without the
        # other (a partial failure): a re-send finds the claim with the same fingerprint and
        # writes the observation, or the observation stored and writes the claim.
        calls, retries, bad = self._batch_write(
            [self._attributes(observations[i]) for i in new.values()]
            + [self._claim(observations[i]) for i in unclaimed.values()], "put")
        refused_claims: list[dict[str, Any]] = []
        for item in bad:
            key = (item["pk"]["S"], item["sk"]["S"])
            i = new.pop(key) if key in new else unclaimed[key]
            refused[i] = ITEM_UNSTORABLE
        # An observation the store refused must not keep its id: its claim is taken back.
        for key, i in unclaimed.items():
            if i in refused:
                refused_claims.append({"pk": {"S": key[0]}, "sk": {"S": key[1]}})
        claim_calls, claim_retries, _ = self._batch_write(refused_claims, "delete")
        for i, o in enumerate(observations):  # an exact duplicate shares its first's verdict
            first = first_of.get((partition(o.tenant, o.deployment), o.sort_key))
            if i not in refused and first is not None and first in refused \
                    and observations[first].fingerprint == o.fingerprint:
                refused[i] = refused[first]
        return WriteStats(items=len(new), requests=calls + claim_calls,
                          retries=retries + claim_retries,
                          skipped=len(observations) - len(new) - len(refused),
                          read_requests=reads, refused=refused)

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
        pk = partition(tenant, deployment)
        if before_ms is None:
            condition, claims = None, None
        else:
            condition = self._read.sk < f"{max(before_ms, 0):013d}"
            claims = self._read.sk.startswith(CLAIM)
        keys: list[dict[str, Any]] = []
        count = 0
        try:
            for item in self._read.query(pk, condition, attributes_to_get=["pk", "sk"]):
                keys.append({"pk": {"S": item.pk}, "sk": {"S": item.sk}})
                count += not item.sk.startswith(CLAIM)
            if claims is not None:
                for item in self._read.query(pk, claims, attributes_to_get=["pk", "sk"],
                                             filter_condition=self._read.arrival_ms < before_ms):
                    keys.append({"pk": {"S": item.pk}, "sk": {"S": item.sk}})
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc
        self._batch_write(keys, "delete")
        return count

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
        self._batch_write(keys, "delete")
        return count
