"""Figure 3: DynamoDB write requests per 1,000 captured observations, and retries under
injected throttling.

1,000 observations go through `CaptureService.ingest` in two 500-item batches (the REST batch
limit) into the template's ObservationsTable in an in-process moto. Every DynamoDB request is
counted by wrapping botocore's client call (pynamodb and boto3 both go through it). Throttling is
injected the same way, from the bench side: production code has no fault switch. Two kinds, as
DynamoDB does it to the store's conditional writes: a TransactWriteItems refused outright
(ThrottlingException), and one cancelled because another transaction held one of its items
(TransactionCanceledException, reason TransactionConflict: nothing written).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import Figure, info, main, moto_stack, ratio

N = 1000
BATCH = 500
# Each observation is stored as two items: the observation (sorted by arrival, for window
# Queries) and its id claim (keyed by observation id, so a re-send is found and writes nothing;
# docs/capture.md), each a conditional put. The floor is those actions in full 100-action
# TransactWriteItems requests.
ITEMS_PER_OBSERVATION = 2
FLOOR = N * ITEMS_PER_OBSERVATION // 100
WRITE = "TransactWriteItems"
# Fixed once: a re-sent observation is the same observation (same arrival, same id).
START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)


class Wire:
    """Counts DynamoDB calls and, when asked, throttles a share of the write calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.refuse = 0.0  # share of write calls refused outright
        self.partial = 0.0  # share cancelled by a conflicting transaction
        self.injected: Counter[str] = Counter()
        self.rng = random.Random(9)

    @contextmanager
    def installed(self) -> Iterator[Wire]:
        from botocore.client import BaseClient
        from botocore.exceptions import ClientError

        original = BaseClient._make_api_call
        wire = self

        def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            if client.meta.service_model.service_name != "dynamodb":
                return original(client, operation, params)
            wire.calls[operation] += 1
            if operation == WRITE and wire.rng.random() < wire.refuse:
                wire.injected["refused"] += 1
                raise ClientError({"Error": {"Code": "ThrottlingException",
                                             "Message": "injected by the bench"},
                                   "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
            if operation == WRITE and wire.rng.random() < wire.partial:
                wire.injected["partial"] += 1
                reasons = [{"Code": "TransactionConflict"}] + [{"Code": "None"}] * (
                    len(params["TransactItems"]) - 1)
                raise ClientError({"Error": {"Code": "TransactionCanceledException",
                                             "Message": "injected by the bench"},
                                   "CancellationReasons": reasons,
                                   "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
            return original(client, operation, params)

        BaseClient._make_api_call = call
        try:
            yield self
        finally:
            BaseClient._make_api_call = original


def observations(deployment: str) -> list[dict[str, Any]]:
    return [{"observation_id": f"w-{i:05d}", "deployment": deployment,
             "arrival": (START + timedelta(milliseconds=250 * i)).isoformat().replace("+00:00", "Z"),
             "input_tokens": 1000 + i, "output_tokens": 20 + i % 50, "latency_ms": 400.0 + i,
             "session_id": f"s-{i // 5}"} for i in range(N)]


def ingest(container: Any, items: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(accepted, write requests, retries) as the capture service reports them."""
    accepted = requests = retries = 0
    for start in range(0, len(items), BATCH):
        result = container.capture.ingest("demo", items[start:start + BATCH])
        accepted += result.accepted
        requests += result.stats.requests
        retries += result.stats.retries
    return accepted, requests, retries


def stored(container: Any, deployment: str) -> int:
    return sum(1 for _ in container.observations.query("demo", deployment, 0, 2**41))


def run() -> list[Figure]:
    from infercrane.clock import utcnow

    figures: list[Figure] = []
    with moto_stack() as stack, Wire().installed() as wire:
        container = stack.container
        container.tenancy.ensure_tenant("demo", utcnow())

        wire.calls.clear()
        accepted, _, _ = ingest(container, observations("clean"))
        writes = wire.calls[WRITE]
        reads = wire.calls["BatchGetItem"]
        figures.append(ratio(f"DynamoDB write requests per 1,000 observations / floor {FLOOR}",
                             writes / FLOOR, "<= 1.05",
                             f"{writes} {WRITE} for {accepted:,} observations in two "
                             f"500-item batches (floor {FLOOR}: {ITEMS_PER_OBSERVATION} conditional "
                             f"puts per observation, the observation and its id claim, 100 a "
                             f"request)",
                             writes=writes))
        figures.append(info("DynamoDB read requests per 1,000 observations", reads, "requests",
                            "BatchGetItem (100 keys) that find already-stored ids, so a re-send "
                            "writes nothing"))
        wire.calls.clear()
        ingest(container, observations("clean"))
        figures.append(info("DynamoDB write requests per 1,000 re-sent observations",
                            wire.calls[WRITE], "requests",
                            f"the same 1,000 again: {wire.calls['BatchGetItem']} reads, "
                            f"{stored(container, 'clean'):,} stored"))

        for refuse, partial in ((0.2, 0.0), (0.0, 0.3)):
            wire.calls.clear()
            wire.injected.clear()
            wire.refuse, wire.partial = refuse, partial
            name = f"throttled-{int(refuse * 100)}-{int(partial * 100)}"
            t0 = time.perf_counter()
            accepted, reported, retries = ingest(container, observations(name))
            took = time.perf_counter() - t0
            wire.refuse = wire.partial = 0.0
            writes = wire.calls[WRITE]
            injected = sum(wire.injected.values())
            count = stored(container, name)
            kind = (f"{refuse:.0%} of {WRITE} refused" if refuse else
                    f"{partial:.0%} of {WRITE} cancelled by a conflict")
            # Each injected throttle should cost exactly one more request, and lose nothing.
            fig = ratio(f"write requests under throttling / ({FLOOR} + injected), {kind}",
                        writes / (FLOOR + injected), "<= 1.05",
                        f"{injected} injected, {retries} retries, {writes} requests "
                        f"(service reports {reported}), {count:,}/{N:,} stored, "
                        f"{took:.2f} s incl. backoff", retries=retries, injected=injected,
                        stored=count)
            if count != N:
                fig.met = False
            figures.append(fig)
    return figures


if __name__ == "__main__":
    main(run)
