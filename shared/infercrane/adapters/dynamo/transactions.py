"""Conditional writes grouped in units that commit together or not at all (TransactWriteItems).

A unit is the writes of one thing (an attempt; a rollup's parts, its stale parts' deletions and the
checks of the marks it was built from). Units are packed into transactions of at most 100 actions
and ~3.5 MB (DynamoDB's limits: 100 actions, 4 MB), never split. A cancelled transaction has
written nothing: its units whose own condition failed are settled as not written (another writer
got there first), the others are sent again with capped exponential backoff and full jitter.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pynamodb.exceptions import TransactWriteError

from infercrane.errors import DependencyUnavailable

TRANSACT_ITEMS = 100
TRANSACT_BYTES = 3_500_000
MAX_ATTEMPTS = 8
RETRYABLE = {None, "ProvisionedThroughputExceededException", "ThrottlingException",
             "RequestLimitExceeded", "InternalServerError", "ServiceUnavailable"}


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


def write_units(connection: Any, units: Sequence[Unit], unavailable: str,
                sleep: Callable[[float], None] = time.sleep) -> list[bool]:
    """Which units were written (False: a condition of its own failed). `connection` is a
    pynamodb Connection; `DependencyUnavailable(unavailable)` on any other failure or when
    retries run out."""
    written = {id(u): False for u in units}
    pending = list(units)
    for attempt in range(MAX_ATTEMPTS):
        if not pending:
            break
        if attempt:
            sleep(random.uniform(0, min(1.0, 0.05 * 2 ** attempt)))
        again: list[Unit] = []
        for chunk in _packed(pending):
            try:
                # pynamodb orders a transaction's actions: checks, deletes, puts (then updates).
                connection.transact_write_items([c for u in chunk for c in u.checks],
                                                [d for u in chunk for d in u.deletes],
                                                [p for u in chunk for p in u.puts], [])
            except TransactWriteError as exc:
                code = exc.cause_response_code
                if code != "TransactionCanceledException" and code not in RETRYABLE:
                    raise DependencyUnavailable(unavailable) from exc
                reasons = getattr(exc.cause, "cancellation_reasons", []) or []
                owners = ([u for u in chunk for _ in u.checks] + [u for u in chunk for _ in u.deletes]
                          + [u for u in chunk for _ in u.puts])
                failed = {id(u) for u, r in zip(owners, reasons, strict=False)
                          if r is not None and r.code == "ConditionalCheckFailed"}
                again += [u for u in chunk if id(u) not in failed]
                continue
            for u in chunk:
                written[id(u)] = True
        pending = again
    if pending:
        raise DependencyUnavailable(unavailable)
    return [written[id(u)] for u in units]
