"""Helpers the promise modules share: fixed qualification data, lookups into the stack's storage
from the test side, and polling."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from infercrane.qualify.target import Target

T = TypeVar("T")


def table_name(target: Target, logical: str) -> str:
    for name in target.aws("dynamodb").list_tables()["TableNames"]:
        if name == logical or name.endswith("-" + logical):
            return str(name)
    raise LookupError(f"no table {logical}")


def queue_url(target: Target, logical: str) -> str:
    for name, url in target.queue_urls().items():
        if name == logical or name.endswith("-" + logical):
            return url
    raise LookupError(f"no queue {logical}")


def observation_items(target: Target, tenant: str, deployment: str) -> list[dict[str, Any]]:
    """The stored observations of one (tenant, deployment): one Query on the documented key. The
    partition's `ID#<observation_id>` claim items (docs/capture.md) sort after every arrival key
    and are not observations."""
    ddb = target.aws("dynamodb")
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table_name(target, "ObservationsTable"),
                              "KeyConditionExpression": "pk = :p AND sk < :claims",
                              "ExpressionAttributeValues": {":p": {"S": f"{tenant}#{deployment}"},
                                                            ":claims": {"S": "ID#"}}}
    while True:
        page = ddb.query(**kwargs)
        items += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def wait_for(fn: Callable[[], T], done: Callable[[T], bool], timeout_s: float = 30.0,
             every_s: float = 0.3) -> T:
    """Poll `fn` until `done(value)` or the timeout; the last value either way."""
    deadline = time.monotonic() + timeout_s
    value = fn()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(every_s)
        value = fn()
    return value


def missing_routes(target: Target, probes: list[tuple[str, str]]) -> list[str]:
    return [f"{m} {p}" for m, p in probes if not target.route_exists(m, p)]

