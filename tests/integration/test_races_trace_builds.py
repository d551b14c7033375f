"""An asynchronous trace build's record is read, changed and written back as the build runs; SQS
may deliver its message twice, so two runs of one build can overlap. A finished record is never
turned back into a running one, and a run killed after any of its record writes is completed by
the message's redelivery."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infercrane.adapters.dynamo.trace_builds import DynamoTraceBuildStore
from infercrane.domain.replay import TraceService
from tests.fakes import BASE_MS, FakeQueue, observation

NOW = datetime.fromtimestamp((BASE_MS + 3_600_000) / 1000, UTC)


class Crash(Exception):
    pass


class Builds:
    """The real build store, optionally killed after its k-th write or answering a stale read
    (what a second delivery read before the first one finished)."""

    def __init__(self, real: DynamoTraceBuildStore, crash_after: int | None = None,
                 stale: dict[str, Any] | None = None):
        self.real, self.crash_after, self.stale, self.writes = real, crash_after, stale, 0

    def put_build(self, tenant: str, build: Any) -> bool:
        written = self.real.put_build(tenant, build)
        self.writes += 1
        if self.writes == self.crash_after:
            raise Crash
        return written

    def get_build(self, tenant: str, build_id: str) -> Any:
        stale, self.stale = self.stale, None
        return stale if stale is not None else self.real.get_build(tenant, build_id)


def service(aws, builds: Any) -> TraceService:
    c = aws.container
    return TraceService(c.observations, c.traces, c.documents, builds=builds,
                        build_queue=FakeQueue(), sync_limit=10, signer=lambda: c.signer)


def queued(aws) -> tuple[str, dict[str, Any]]:
    aws.container.observations.put_many([observation(i, deployment="async") for i in range(30)])
    outcome = service(aws, aws.container.trace_builds).request_build(
        "demo", "async", "1h", NOW, 25, NOW, "r-1")
    assert outcome.build is not None
    build_id = outcome.build["build_id"]
    return build_id, aws.container.trace_builds.get_build("demo", build_id)


def later() -> datetime:
    return NOW + timedelta(seconds=5)


def test_progress_written_concurrently_never_unfinishes_a_finished_build(aws):
    store = aws.container.trace_builds
    build_id, record = queued(aws)
    refused: list[bool] = []

    def runner() -> None:
        for n in range(15):
            refused.append(not store.put_build("demo", {**record, "status": "running",
                                                        "records_read": n}))

    threads = [threading.Thread(target=runner) for _ in range(4)]
    for t in threads:
        t.start()
    assert store.put_build("demo", {**record, "status": "succeeded", "digest": "d" * 64})
    for t in threads:
        t.join()
    assert store.get_build("demo", build_id)["status"] == "succeeded"
    assert not store.put_build("demo", {**record, "status": "running"})


def test_a_second_delivery_that_read_the_build_before_it_finished_leaves_it_finished(aws):
    build_id, record = queued(aws)
    first = service(aws, aws.container.trace_builds).run_build("demo", build_id, later)
    assert first["status"] == "succeeded"
    builds = Builds(aws.container.trace_builds, stale=record)
    again = service(aws, builds).run_build("demo", build_id, later)
    assert again == first
    assert builds.writes == 1  # its first progress write was refused: it streamed nothing
    assert aws.container.trace_builds.get_build("demo", build_id)["status"] == "succeeded"


def test_a_build_killed_after_any_record_write_is_completed_by_the_redelivery(aws):
    build_id, _ = queued(aws)
    clean = Builds(aws.container.trace_builds)
    expected = service(aws, clean).run_build("demo", build_id, later)
    boundaries = clean.writes
    assert boundaries >= 2  # running, succeeded
    for k in range(1, boundaries + 1):
        build_id, _ = queued(aws)
        with pytest.raises(Crash):
            service(aws, Builds(aws.container.trace_builds, crash_after=k)).run_build(
                "demo", build_id, later)
        done = service(aws, aws.container.trace_builds).run_build("demo", build_id, later)
        assert (done["status"], done["digest"]) == ("succeeded", expected["digest"])
