"""A prefetch request whose adapter goes silent ends: bounded re-dispatches with back-off, then
`failed` / `adapter_unresponsive`, and nothing re-sends it afterwards. Against moto, with the
sweeper and the dispatcher driven by an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.domain.cache import CacheSweeper
from infercrane.domain.prefetch import ADAPTER_UNRESPONSIVE, MAX_REDISPATCHES, PrefetchService
from tests.integration.test_cache_prefetch import DIGEST, Clock, drain, load_handler, sqs_event
from tests.support.lambda_context import LambdaContext


class Recorded:
    """A transport that keeps what was sent (the queues' wiring is covered elsewhere); it keeps
    these many-hour runs to DynamoDB calls only."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, body: dict[str, Any]) -> str:
        self.sent.append(body)
        return str(len(self.sent))

    def take(self) -> list[dict[str, Any]]:
        out, self.sent = self.sent, []
        return out


def wired(aws: Any, clock: Clock) -> tuple[PrefetchService, CacheSweeper, Recorded, Recorded]:
    queue, adapter = Recorded(), Recorded()
    prefetch = PrefetchService(aws.container.cache_store, queue, {"aws": adapter}, clock)
    return prefetch, CacheSweeper(aws.container.cache_store, prefetch, clock), queue, adapter


def run_until(prefetch: PrefetchService, sweeper: CacheSweeper, queue: Recorded,
              adapter: Recorded, clock: Clock, until: datetime, step: timedelta,
              on_adapter_message: Any = None) -> list[datetime]:
    """Every `step` (the schedule): sweep, dispatch what it enqueued. Returns the times the
    adapter was sent a prefetch message."""
    sent_at: list[datetime] = []
    while clock.now < until:
        clock.now += step
        sweeper.sweep()
        for body in queue.take():
            prefetch.dispatch(body["tenant"], body["request_id"])
        for body in adapter.take():
            sent_at.append(clock.now)
            if on_adapter_message:
                on_adapter_message(body)
    return sent_at


def first_dispatch(prefetch: PrefetchService, queue: Recorded, adapter: Recorded) -> None:
    for body in queue.take():
        prefetch.dispatch(body["tenant"], body["request_id"])
    assert len(adapter.take()) == 1


def test_a_silent_adapter_gets_bounded_redispatches_then_the_request_fails(aws: Any) -> None:
    t0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    clock = Clock(t0)
    prefetch, sweeper, queue, adapter = wired(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-silent")
    first_dispatch(prefetch, queue, adapter)

    # The adapter never answers. Sweep every 15 minutes (the schedule is 5; the back-off's steps
    # are multiples of 15) for twelve hours, then now and then for
    # the rest of the request's retention.
    resent = run_until(prefetch, sweeper, queue, adapter, clock, t0 + timedelta(hours=12),
                       timedelta(minutes=15))
    for day in (1, 7, 30, 89):
        clock.now = t0 + timedelta(days=day)
        assert sweeper.sweep().requests_redispatched == 0
        assert queue.take() == []

    assert len(resent) == MAX_REDISPATCHES
    gaps = [(b - a).total_seconds() for a, b in zip([t0, *resent], resent, strict=False)]
    assert gaps == sorted(gaps) and gaps[-1] >= 4 * gaps[0], gaps  # backing off
    done = prefetch.get("demo", req.id)
    assert done.status == "failed" and done.failure_reason == ADAPTER_UNRESPONSIVE
    assert done.redispatches == MAX_REDISPATCHES
    assert done.dispatch_count == 1 + MAX_REDISPATCHES
    assert done.updated_at < t0 + timedelta(hours=12)  # given up on within hours, not days


def test_an_adapter_stuck_in_progress_is_redispatched_then_fails(aws: Any) -> None:
    t0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    clock = Clock(t0)
    prefetch, sweeper, queue, adapter = wired(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "aws", "us-east-1b", "snap-stuck")
    first_dispatch(prefetch, queue, adapter)
    # The adapter picks it up, says in_progress, then dies (each re-send it picks up, same).
    prefetch.transition("demo", req.id, "in_progress")

    def picks_up_and_dies(body: dict[str, Any]) -> None:
        prefetch.transition(body["tenant"], body["request_id"], "in_progress")

    resent = run_until(prefetch, sweeper, queue, adapter, clock, t0 + timedelta(hours=16),
                       timedelta(minutes=15), picks_up_and_dies)
    assert len(resent) == MAX_REDISPATCHES
    done = prefetch.get("demo", req.id)
    assert (done.status, done.failure_reason) == ("failed", ADAPTER_UNRESPONSIVE)


def test_an_adapter_that_keeps_reporting_in_progress_is_not_redispatched(aws: Any) -> None:
    t0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    clock = Clock(t0)
    prefetch, sweeper, queue, adapter = wired(aws, clock)
    req, _ = prefetch.request("demo", DIGEST, "aws", "us-east-1c", "snap-slow")
    first_dispatch(prefetch, queue, adapter)
    # A slow volume: the adapter's re-checks (every 15 minutes) report in_progress for 4 hours,
    # four times the in-progress deadline.
    for _ in range(16):
        prefetch.transition("demo", req.id, "in_progress")
        assert run_until(prefetch, sweeper, queue, adapter, clock,
                         clock.now + timedelta(minutes=15), timedelta(minutes=15)) == []
    prefetch.transition("demo", req.id, "completed")
    done = prefetch.get("demo", req.id)
    assert (done.status, done.redispatches, done.dispatch_count) == ("completed", 0, 1)


def test_the_sweep_handler_reports_requests_it_gave_up_on(aws: Any) -> None:
    past = Clock(datetime.now(UTC) - timedelta(days=2))
    c = aws.container
    req, _ = PrefetchService(c.cache_store, Recorded(), c.adapter_transports, past).request(
        "demo", DIGEST, "aws", "us-west-2a", "snap-old")
    sweep = load_handler("cache_sweep")
    dispatch = load_handler("prefetch_dispatch")
    results = []
    # Each deployed sweep sees it overdue (it is two days old); the dispatcher re-sends it.
    store = aws.container.cache_store
    for _ in range(MAX_REDISPATCHES + 2):
        # Make the next due time arrive now: what the back-off would do over hours.
        for entry in store.due("pf", datetime.now(UTC) + timedelta(days=1), 10):
            store.postpone(entry, datetime.now(UTC) - timedelta(seconds=1))
        results.append(sweep.handler({}, LambdaContext("sweep")))
        queued = drain(aws, "PrefetchQueue")
        if queued:
            dispatch.handler(sqs_event(queued), LambdaContext("dispatch"))
    assert [r["requests_redispatched"] for r in results] == [1] * MAX_REDISPATCHES + [0, 0]
    assert [r["requests_failed"] for r in results] == [0] * MAX_REDISPATCHES + [1, 0]
    doc = aws.container.prefetch.get("demo", req.id).document()
    assert doc["status"] == "failed" and doc["failure_reason"] == "adapter_unresponsive"
    assert doc["redispatches"] == MAX_REDISPATCHES
