"""write_units against a scripted connection: what each DynamoDB answer settles a unit as, and
what is sent again. (The integration tier runs it against moto's server.)"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from pynamodb.exceptions import CancellationReason, TransactWriteError, VerboseClientError

from infercrane.adapters.dynamo.transactions import (
    FAILED,
    REFUSED,
    WRITTEN,
    Unit,
    write_units,
)
from infercrane.errors import DependencyUnavailable


def unit(n: int, size: int = 1) -> Unit:
    return Unit(puts=[{"TableName": "T", "Item": {"pk": {"S": f"u{n}"}, "sk": {"S": str(k)}}}
                      for k in range(size)])


def cancelled(*codes: str | None) -> TransactWriteError:
    reasons = [None if c is None else CancellationReason(c) for c in codes]
    return TransactWriteError("cancelled", VerboseClientError(
        {"Error": {"Code": "TransactionCanceledException"}}, "TransactWriteItems",
        cancellation_reasons=reasons))


def error(code: str) -> TransactWriteError:
    return TransactWriteError(code, ClientError({"Error": {"Code": code}}, "TransactWriteItems"))


class Connection:
    """Answers each transaction with the next scripted answer (an exception or None: commit)."""

    def __init__(self, *answers: Any):
        self.answers = list(answers)
        self.sent: list[list[str]] = []

    def transact_write_items(self, checks: Any, deletes: Any, puts: Any, updates: Any) -> None:
        self.sent.append([p["Item"]["pk"]["S"] for p in puts])
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer


def run(conn: Connection, units: list[Unit]) -> Any:
    return write_units(conn, units, "down", sleep=lambda s: None)


def test_a_unit_whose_condition_failed_is_settled_and_the_rest_sent_again() -> None:
    units = [unit(0), unit(1), unit(2)]
    conn = Connection(cancelled(None, "ConditionalCheckFailed", None))
    written = run(conn, units)
    assert written.outcomes == [WRITTEN, FAILED, WRITTEN]
    assert conn.sent == [["u0", "u1", "u2"], ["u0", "u2"]]
    assert (written.requests, written.retries) == (2, 1)


def test_a_request_refused_for_its_content_is_halved_until_the_unit_is_alone() -> None:
    units = [unit(n) for n in range(4)]
    refused = error("ValidationException")
    conn = Connection(refused, None, refused, refused, None)
    written = run(conn, units)
    assert written.outcomes == [WRITTEN, WRITTEN, REFUSED, WRITTEN]
    assert conn.sent == [["u0", "u1", "u2", "u3"], ["u0", "u1"], ["u2", "u3"], ["u2"], ["u3"]]


def test_an_item_level_validation_reason_refuses_only_its_unit() -> None:
    conn = Connection(cancelled("ValidationError", None))
    assert run(conn, [unit(0), unit(1)]).outcomes == [REFUSED, WRITTEN]


def test_units_are_never_split_across_transactions() -> None:
    units = [unit(n, size=30) for n in range(4)]  # 30 actions each: 3 fit in 100
    conn = Connection()
    run(conn, units)
    assert [len(s) for s in conn.sent] == [90, 30]


def test_throttling_past_every_retry_and_other_errors_are_the_store_being_unavailable() -> None:
    with pytest.raises(DependencyUnavailable):
        run(Connection(*[error("ThrottlingException")] * 8), [unit(0)])
    with pytest.raises(DependencyUnavailable):
        run(Connection(error("AccessDeniedException")), [unit(0)])
