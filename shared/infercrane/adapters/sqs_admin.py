"""SQS adapter for queue/DLQ administration. DLQ URLs are discovered from each queue's redrive
policy, so settings name only the source queues."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable
from infercrane.ports.queues import DeadLetter, QueueDepth


class SqsQueueAdmin:
    def __init__(self, client: Any, queues: dict[str, str]):
        self._sqs = client
        self._queues = queues
        self._dlq_urls: dict[str, str] = {}

    def names(self) -> list[str]:
        return list(self._queues)

    def _dlq_url(self, name: str) -> str:
        if name not in self._dlq_urls:
            attrs = self._call("get_queue_attributes", QueueUrl=self._queues[name],
                               AttributeNames=["RedrivePolicy"])["Attributes"]
            arn = json.loads(attrs["RedrivePolicy"])["deadLetterTargetArn"]
            self._dlq_urls[name] = self._call("get_queue_url",
                                              QueueName=arn.rsplit(":", 1)[1])["QueueUrl"]
        return self._dlq_urls[name]

    def _counts(self, url: str) -> tuple[int, int]:
        attrs = self._call("get_queue_attributes", QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return (int(attrs.get("ApproximateNumberOfMessages", 0)),
                int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)))

    def depth(self, name: str) -> QueueDepth:
        visible, in_flight = self._counts(self._queues[name])
        dlq_visible, _ = self._counts(self._dlq_url(name))
        return QueueDepth(name, visible, in_flight, dlq_visible)

    def peek_dead_letters(self, name: str, limit: int) -> list[DeadLetter]:
        url = self._dlq_url(name)
        got = self._call("receive_message", QueueUrl=url, MaxNumberOfMessages=limit,
                         VisibilityTimeout=0, WaitTimeSeconds=0,
                         MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                         MessageAttributeNames=["All"]).get("Messages", [])
        letters = []
        for m in got:
            attrs = {k: v.get("StringValue", "") for k, v in (m.get("MessageAttributes") or {}).items()
                     if k not in ("signature",)}
            system = m.get("Attributes") or {}
            letters.append(DeadLetter(
                message_id=m["MessageId"],
                receive_count=int(system.get("ApproximateReceiveCount", 0)),
                sent_at_ms=int(system.get("SentTimestamp", 0)),
                size_bytes=len(m.get("Body", "").encode()),
                attributes=attrs,
            ))
        return letters

    def redrive(self, name: str, limit: int) -> int:
        # Receive-send-delete rather than StartMessageMoveTask: it works on every SQS
        # implementation and lets the caller bound the move. A crash between send and delete
        # can duplicate a message; every consumer here is idempotent, so that is safe.
        source, dlq = self._queues[name], self._dlq_url(name)
        moved = 0
        while moved < limit:
            got = self._call("receive_message", QueueUrl=dlq,
                             MaxNumberOfMessages=min(10, limit - moved), VisibilityTimeout=60,
                             WaitTimeSeconds=0, MessageAttributeNames=["All"]).get("Messages", [])
            if not got:
                break
            for m in got:
                kwargs: dict[str, Any] = {"QueueUrl": source, "MessageBody": m["Body"]}
                if m.get("MessageAttributes"):
                    kwargs["MessageAttributes"] = {
                        k: {kk: vv for kk, vv in v.items()
                            if kk in ("DataType", "StringValue", "BinaryValue")}
                        for k, v in m["MessageAttributes"].items()
                    }
                self._call("send_message", **kwargs)
                self._call("delete_message", QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
                moved += 1
        return moved

    def _call(self, op: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._sqs, op)(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("SQS is unavailable.") from exc
