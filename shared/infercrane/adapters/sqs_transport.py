"""SQS adapter of the message-transport port: the prefetch queue and each adapter's own queue
(each with a DLQ in template.yaml)."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable


class SqsTransport:
    def __init__(self, client: Any, queue_url: str):
        self._sqs = client
        self.queue_url = queue_url

    def send(self, body: dict[str, Any]) -> str:
        try:
            sent = self._sqs.send_message(QueueUrl=self.queue_url,
                                          MessageBody=json.dumps(body, sort_keys=True))
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("The queue is unavailable.") from exc
        return str(sent["MessageId"])
