"""Helpers the promise modules share: fixed qualification data, lookups into the stack's storage
from the test side, and polling."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from infercrane.domain.observation import StoredObservation
from infercrane.qualify.target import Target

if TYPE_CHECKING:
    from infercrane.adapters.segments.store import SegmentObservationStore

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


def bucket_name(target: Target, logical: str) -> str:
    for bucket in target.aws("s3").list_buckets().get("Buckets", []):
        name = str(bucket["Name"])
        if name.lower() == logical.lower() or name.lower().endswith("-" + logical.lower()):
            return name
    raise LookupError(f"no bucket {logical}")


def segment_store(target: Target) -> SegmentObservationStore:
    """The service's observation store, read with the target's clients (docs/capture.md,
    Storage: segments on S3, one index item each)."""
    from infercrane.adapters.segments.store import SegmentObservationStore

    return SegmentObservationStore(target.aws("s3"), target.aws("dynamodb"),
                                   bucket_name(target, "DocumentsBucket"),
                                   table_name(target, "ObservationsTable"), retention_days=30)


def stored_observations(target: Target, tenant: str, deployment: str) -> list[StoredObservation]:
    """The stored observations of one (tenant, deployment), as a trace reads them: every segment
    of the deployment, merged and deduplicated."""
    return list(segment_store(target).query(tenant, deployment, 0, 10**13 - 1))


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

