"""Conditional writes grouped in units that commit together or not at all (TransactWriteItems).

A unit is the writes of one thing (an observation and its id claim; an attempt; a rollup's parts,
its stale parts' deletions and the checks of what it was built from). Units are packed into
transactions of at most 100 actions and ~3.5 MB (DynamoDB's limits: 100 actions, 4 MB), never
split, a few transactions at a time. A cancelled transaction has written nothing: a unit whose own
condition failed is settled `failed` (another writer got there first), one DynamoDB refused for
what it holds (ValidationException: the request is halved until the unit is alone) `refused`, and
the others are sent again with capped exponential backoff and full jitter.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pynamodb.exceptions import TransactWriteError

from infercrane.errors import DependencyUnavailable

TRANSACT_ITEMS = 100
TRANSACT_BYTES = 3_500_000
MAX_ATTEMPTS = 8
RETRYABLE = {None, "ProvisionedThroughputExceededException", "ThrottlingException",
             "RequestLimitExceeded", "InternalServerError", "ServiceUnavailable"}
WRITTEN, FAILED, REFUSED = "written", "failed", "refused"


@dataclass(eq=False)
class Unit:
    checks: list[dict[str, Any]] = field(default_factory=list)
    puts: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def actions(self) -> int:
        return len(self.checks) + len(self.puts) + len(self.deletes)

    @property
    def size(self) -> int:
        return sum(len(json.dumps(p["Item"])) for p in self.puts)


@dataclass
class Written:
    outcomes: list[str]  # per unit: WRITTEN, FAILED (a condition of its own) or REFUSED
    requests: int = 0
    retries: int = 0


def _packed(units: Sequence[Unit]) -> list[list[Unit]]:
    chunks: list[list[Unit]] = []
    actions = size = 0
    for u in units:
        n, b = u.actions, u.size
        if not chunks or actions + n > TRANSACT_ITEMS or size + b > TRANSACT_BYTES:
            chunks.append([])
            actions = size = 0
        chunks[-1].append(u)
        actions += n
        size += b
    return chunks


def _send(connection: Any, chunk: list[Unit], unavailable: str,
          settled: dict[int, str]) -> tuple[int, list[Unit]]:
    """One transaction (halved on a ValidationException); (requests, units to send again)."""
    try:
        # pynamodb orders a transaction's actions: checks, deletes, puts (then updates).
        connection.transact_write_items([c for u in chunk for c in u.checks],
                                        [d for u in chunk for d in u.deletes],
                                        [p for u in chunk for p in u.puts], [])
    except TransactWriteError as exc:
        code = exc.cause_response_code
        if code == "ValidationException":  # the request as a whole: find the unit alone
            if len(chunk) == 1:
                settled[id(chunk[0])] = REFUSED
                return 1, []
            half = len(chunk) // 2
            a, b = (_send(connection, part, unavailable, settled)
                    for part in (chunk[:half], chunk[half:]))
            return 1 + a[0] + b[0], a[1] + b[1]
        if code != "TransactionCanceledException" and code not in RETRYABLE:
            raise DependencyUnavailable(unavailable) from exc
        reasons = getattr(exc.cause, "cancellation_reasons", []) or []
        owners = ([u for u in chunk for _ in u.checks] + [u for u in chunk for _ in u.deletes]
                  + [u for u in chunk for _ in u.puts])
        for u, r in zip(owners, reasons, strict=False):
            if r is not None and r.code == "ConditionalCheckFailed":
                settled[id(u)] = FAILED
            elif r is not None and r.code == "ValidationError":
                settled[id(u)] = REFUSED
        return 1, [u for u in chunk if id(u) not in settled]
    for u in chunk:
        settled[id(u)] = WRITTEN
    return 1, []


def write_units(connection: Any, units: Sequence[Unit], unavailable: str, *,
                sleep: Callable[[float], None] = time.sleep, parallel: int = 1,
                after_write: Callable[[], None] | None = None) -> Written:
    """Send every unit until it is settled. `connection` is a pynamodb Connection (its client
    without retries of its own: every request is counted here); `DependencyUnavailable
    (unavailable)` on any other failure or when MAX_ATTEMPTS rounds run out. `after_write` is
    the tests' fault hook, called after each transaction sent."""
    settled: dict[int, str] = {}
    result = Written([])
    pending = list(units)
    for attempt in range(MAX_ATTEMPTS):
        if not pending:
            break
        if attempt:
            result.retries += 1
            sleep(random.uniform(0, min(2.0, 0.05 * 2 ** attempt)))

        def one(chunk: list[Unit]) -> tuple[int, list[Unit]]:
            sent = _send(connection, chunk, unavailable, settled)
            if after_write is not None:
                after_write()
            return sent

        chunks = _packed(pending)
        if len(chunks) <= 1 or parallel <= 1:
            sent = [one(c) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(parallel, len(chunks))) as pool:
                sent = list(pool.map(one, chunks))
        result.requests += sum(n for n, _ in sent)
        pending = [u for _, again in sent for u in again]
    if pending:
        raise DependencyUnavailable(unavailable)
    result.outcomes = [settled[id(u)] for u in units]
    return result
