"""DynamoDB adapter for observations (pynamodb).

Layout (fixed, see template.yaml): pk = "<tenant>#<deployment>", sk = "<arrival ms:013d>#<id>",
TTL attribute `expires_at` = ingest time + retention. A window read is one paginated Query on the
partition with a key condition, never a Scan.

Writes are BatchWriteItem, 25 items a request. Unprocessed items and throttling are retried here
with capped exponential backoff and full jitter (the connection itself does not retry, so every
request is counted in `WriteStats`). Idempotence: keys already in the table are found first with
BatchGetItem (keys only, 100 a request) and are not written again, so a re-sent observation
changes nothing, not even its expiry, and a re-import costs reads but no writes.
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

from infercrane.adapters.dynamo.base import DynamoConfig, bind
from infercrane.domain.observation import StoredObservation
from infercrane.errors import DependencyUnavailable
from infercrane.ports.observations import WriteStats

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


def partition(tenant: str, deployment: str) -> str:
    return f"{tenant}#{deployment}"


class _Throttled(Exception):
    pass


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
    def _item(self, o: StoredObservation) -> ObservationItem:
        return self._write(
            partition(o.tenant, o.deployment), o.sort_key, tenant=o.tenant,
            deployment=o.deployment, observation_id=o.observation_id, arrival_ms=o.arrival_ms,
            input_tokens=o.input_tokens, output_tokens=o.output_tokens, latency_ms=o.latency_ms,
            outcome=o.outcome, streaming=o.streaming, sampling_rate=o.sampling_rate,
            source=o.source, ingested_at_ms=o.ingested_at_ms,
            expires_at=o.ingested_at_ms // 1000 + self._retention_s, revision=o.revision,
            cached_input_tokens=o.cached_input_tokens, ttft_ms=o.ttft_ms,
            provenance=o.provenance, timing_source=o.timing_source, timing_model=o.timing_model,
            session_id=o.session_id, parent_session_id=o.parent_session_id,
            shared_prefix_id=o.shared_prefix_id,
            prefix_block_ids=list(o.prefix_block_ids) if o.prefix_block_ids is not None else None,
            prefix_block_size=o.prefix_block_size, key_version=o.key_version,
        )

    @staticmethod
    def _observation(i: ObservationItem) -> StoredObservation:
        return StoredObservation(
            tenant=i.tenant, deployment=i.deployment, observation_id=i.observation_id,
            arrival_ms=int(i.arrival_ms), input_tokens=int(i.input_tokens),
            output_tokens=int(i.output_tokens), latency_ms=float(i.latency_ms),
            outcome=i.outcome,  # type: ignore[arg-type]
            streaming=bool(i.streaming), sampling_rate=float(i.sampling_rate),
            source=i.source,  # type: ignore[arg-type]
            ingested_at_ms=int(i.ingested_at_ms), revision=i.revision,
            cached_input_tokens=None if i.cached_input_tokens is None else int(i.cached_input_tokens),
            ttft_ms=None if i.ttft_ms is None else float(i.ttft_ms), provenance=i.provenance,
            timing_source=i.timing_source,  # type: ignore[arg-type]
            timing_model=i.timing_model, session_id=i.session_id,
            parent_session_id=i.parent_session_id, shared_prefix_id=i.shared_prefix_id,
            prefix_block_ids=None if i.prefix_block_ids is None else tuple(
                str(b) for b in i.prefix_block_ids),
            prefix_block_size=None if i.prefix_block_size is None else int(i.prefix_block_size),
            key_version=i.key_version,
        )

    # -- retries -----------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> None:
        self._sleep(random.uniform(0, min(self._cap, self._base * 2 ** attempt)))

    def _call(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return fn()
        except PynamoDBException as exc:
            if getattr(exc, "cause_response_code", None) in RETRYABLE:
                raise _Throttled from exc
            raise DependencyUnavailable("The observation store is unavailable.") from exc

    def _write_chunk(self, chunk: list[dict[str, Any]], kind: str) -> tuple[int, int]:
        """One chunk of up to 25 requests until fully processed; (calls, retries)."""
        calls = retries = attempt = 0
        conn = self._write._get_connection()
        key, field = ("PutRequest", "Item") if kind == "put" else ("DeleteRequest", "Key")
        pending = chunk
        while pending:
            calls += 1
            try:
                sent = pending
                response = self._call(lambda c=sent: conn.batch_write_item(  # type: ignore[misc]
                    **{f"{kind}_items": c}))
                left = (response or {}).get("UnprocessedItems", {}).get(self._table, [])
                pending = [u[key][field] for u in left]
            except _Throttled as exc:
                if attempt + 1 >= MAX_ATTEMPTS:
                    raise DependencyUnavailable("The observation store is throttling.") from exc
            if pending:
                attempt += 1
                if attempt >= MAX_ATTEMPTS:
                    raise DependencyUnavailable("The observation store is throttling.")
                retries += 1
                self._backoff(attempt)
        return calls, retries

    def _batch_write(self, requests: list[dict[str, Any]], kind: str) -> tuple[int, int]:
        """BatchWriteItem of `requests` ({attr: {type: value}}), 25 a call; (calls, retries).

        Chunks go out a few at a time: a 500-item batch is 20 requests, and waiting for each in
        turn would make the network round trip, not DynamoDB, the limit."""
        chunks = [requests[i:i + WRITE_BATCH] for i in range(0, len(requests), WRITE_BATCH)]
        if len(chunks) <= 1 or self._parallel <= 1:
            results = [self._write_chunk(c, kind) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self._parallel, len(chunks))) as pool:
                results = list(pool.map(lambda c: self._write_chunk(c, kind), chunks))
        return sum(r[0] for r in results), sum(r[1] for r in results)

    def _existing_chunk(self, keys: list[tuple[str, str]]) -> tuple[set[tuple[str, str]], int]:
        found: set[tuple[str, str]] = set()
        calls = attempt = 0
        conn = self._write._get_connection()
        pending: list[Any] = [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in keys]
        while pending:
            calls += 1
            try:
                sent = pending
                response = self._call(lambda c=sent: conn.batch_get_item(  # type: ignore[misc]
                    c, consistent_read=True, attributes_to_get=["pk", "sk"]))
                for row in response.get("Responses", {}).get(self._table, []):
                    found.add((row["pk"]["S"], row["sk"]["S"]))
                pending = response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", [])
            except _Throttled as exc:
                if attempt + 1 >= MAX_ATTEMPTS:
                    raise DependencyUnavailable("The observation store is throttling.") from exc
            if pending:
                attempt += 1
                if attempt >= MAX_ATTEMPTS:
                    raise DependencyUnavailable("The observation store is throttling.")
                self._backoff(attempt)
        return found, calls

    def _existing(self, keys: list[tuple[str, str]]) -> tuple[set[tuple[str, str]], int]:
        """Which of these keys are stored already; (keys, BatchGetItem calls)."""
        chunks = [keys[i:i + READ_BATCH] for i in range(0, len(keys), READ_BATCH)]
        if len(chunks) <= 1 or self._parallel <= 1:
            results = [self._existing_chunk(c) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self._parallel, len(chunks))) as pool:
                results = list(pool.map(self._existing_chunk, chunks))
        return set().union(*(r[0] for r in results)), sum(r[1] for r in results)

    # -- port --------------------------------------------------------------------------------
    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        unique: dict[tuple[str, str], StoredObservation] = {}
        for o in observations:
            unique.setdefault((partition(o.tenant, o.deployment), o.sort_key), o)
        existing, reads = self._existing(list(unique))
        new = [o for k, o in unique.items() if k not in existing]
        calls, retries = self._batch_write([self._item(o).serialize() for o in new], "put")
        return WriteStats(items=len(new), requests=calls, retries=retries,
                          skipped=len(observations) - len(new), read_requests=reads)

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, page_size: int | None = None) -> Iterator[StoredObservation]:
        if end_ms <= start_ms or (limit is not None and limit <= 0):
            return
        # "$" sorts right after "#": the upper bound takes every id at arrival end_ms - 1.
        condition = self._read.sk.between(f"{max(start_ms, 0):013d}", f"{end_ms - 1:013d}$")
        try:
            for n, item in enumerate(self._read.query(partition(tenant, deployment), condition,
                                                      limit=limit, page_size=page_size), 1):
                yield self._observation(item)
                if limit is not None and n >= limit:
                    return
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        condition = None if before_ms is None else self._read.sk < f"{max(before_ms, 0):013d}"
        keys: list[dict[str, Any]] = []
        try:
            for item in self._read.query(partition(tenant, deployment), condition,
                                         attributes_to_get=["pk", "sk"]):
                keys.append({"pk": {"S": item.pk}, "sk": {"S": item.sk}})
        except PynamoDBException as exc:
            raise DependencyUnavailable("The observation store is unavailable.") from exc
        self._batch_write(keys, "delete")
        return len(keys)
