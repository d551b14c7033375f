"""Queue consumers and schedules, as Lambda's event source mappings and EventBridge would run them.

A poller per SQS event source receives real SQS messages (long polling, as Lambda's pollers do: a
message is handed over as it arrives, and an idle queue costs one request every five seconds),
builds the Lambda SQS event, invokes the function and deletes only what succeeded
(honouring `batchItemFailures`). Failed messages return
to the queue after a short local retry delay, and moto moves them to the DLQ after the queue's
`maxReceiveCount`, as SQS does.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from infercrane.local.runtime import FunctionError, FunctionPool
from infercrane.local.template import Schedule, SqsSource

log = logging.getLogger("infercrane.local")
# Seconds a receive waits for a message (SQS long polling; moto wakes it as soon as one arrives,
# so a longer wait delays nothing). An idle stack's seven pollers cost moto and botocore 2.5 % of
# a core at 1 s; at 5 s a fifth of that. Stopping does not wait for a poll in flight: the pollers
# are daemon threads, and one that wakes after the stop finds the stop event set and ends.
LONG_POLL_S = 5


def _attr(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"dataType": value.get("DataType", "String"),
                           "stringListValues": [], "binaryListValues": []}
    if "StringValue" in value:
        out["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        import base64

        out["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    return out


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    return {"Records": [{
        "messageId": m["MessageId"],
        "receiptHandle": m["ReceiptHandle"],
        "body": m["Body"],
        "attributes": m.get("Attributes", {}),
        "messageAttributes": {k: _attr(v) for k, v in (m.get("MessageAttributes") or {}).items()},
        "md5OfBody": hashlib.md5(m["Body"].encode()).hexdigest(),  # noqa: S324 - SQS's own checksum
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    } for m in messages]}


def scheduled_event(rule_arn: str, region: str, now: datetime | None = None) -> dict[str, Any]:
    now = now or datetime.now(UTC)
    return {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "123456789012",
            "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "region": region,
            "resources": [rule_arn], "detail": {}}


class SqsPoller(threading.Thread):
    def __init__(self, source: SqsSource, pool: FunctionPool, sqs: Any, queue_url: str,
                 queue_arn: str, region: str, stop: threading.Event, retry_delay_s: int = 1,
                 local_sqs: Any = None):
        super().__init__(name=f"sqs-{source.queue}", daemon=True)
        # `sqs` receives and deletes as Lambda's poller does (the function's role); `local_sqs`
        # shortens a failed message's retry delay, which Lambda does not do (the operator's).
        self.source, self.pool, self.sqs = source, pool, sqs
        self.local_sqs = local_sqs or sqs
        self.queue_url, self.queue_arn, self.region = queue_url, queue_arn, region
        self.stop_event = stop
        self.retry_delay_s = retry_delay_s
        self.idle = threading.Event()

    def poll_once(self) -> int:
        got = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=min(10, self.source.batch_size),
            WaitTimeSeconds=LONG_POLL_S, MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"]).get("Messages", [])
        if not got:
            return 0
        event = sqs_event(got, self.queue_arn, self.region)
        failed: set[str] = {m["MessageId"] for m in got}
        try:
            # Bounded by the function's Timeout, as Lambda bounds it.
            result = self.pool.invoke(event)
            reported = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])} \
                if self.source.report_failures and isinstance(result, dict) else set()
            failed = reported
        except FunctionError as exc:
            if self.stop_event.is_set():
                return 0  # the stack is stopping: the batch returns to the queue
            log.warning("%s failed a batch of %d: %s: %s", self.source.function, len(got),
                        exc.error_type, exc.message)
        done = [m for m in got if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)])
        for m in got:
            if m["MessageId"] in failed:
                # Lambda leaves a failed message invisible for the queue's visibility timeout;
                # locally we shorten that so retries (and DLQ moves) happen in seconds.
                self.local_sqs.change_message_visibility(QueueUrl=self.queue_url,
                                                   ReceiptHandle=m["ReceiptHandle"],
                                                   VisibilityTimeout=self.retry_delay_s)
        return len(got)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                n = self.poll_once()
            except Exception:
                if self.stop_event.is_set():
                    return
                log.exception("polling %s failed", self.source.queue)
                self.idle.set()
                self.stop_event.wait(0.2)
                continue
            if n == 0:
                self.idle.set()  # the long poll itself waited: poll again at once
            else:
                self.idle.clear()


class Scheduler(threading.Thread):
    def __init__(self, schedules: list[Schedule], pools: dict[str, FunctionPool], region: str,
                 stop: threading.Event):
        super().__init__(name="scheduler", daemon=True)
        self.schedules, self.pools, self.region, self.stop_event = schedules, pools, region, stop

    def fire(self, schedule: Schedule) -> Any:
        arn = f"arn:aws:events:{self.region}:123456789012:rule/{schedule.function}-{schedule.name}"
        return self.pools[schedule.function].invoke(scheduled_event(arn, self.region))

    def run(self) -> None:
        due = {s: time.monotonic() + s.every_s for s in self.schedules}
        while not self.stop_event.wait(1.0):
            now = time.monotonic()
            for schedule, at in due.items():
                if now >= at:
                    due[schedule] = now + schedule.every_s
                    try:
                        self.fire(schedule)
                    except FunctionError as exc:
                        if not self.stop_event.is_set():
                            log.warning("scheduled %s failed: %s: %s", schedule.function,
                                        exc.error_type, exc.message)
