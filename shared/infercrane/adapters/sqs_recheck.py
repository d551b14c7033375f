"""SQS adapter for `Rechecks`: the provider adapter re-sends a message to its own queue with
DelaySeconds, so a resource still being prepared is looked at again later."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable


class SqsRechecks:
    def __init__(self, client: Any, queue_url: str):
        self._sqs = client
        self._url = queue_url

    def schedule(self, body: Mapping[str, Any], delay_s: int) -> None:
        try:
            self._sqs.send_message(QueueUrl=self._url, MessageBody=json.dumps(dict(body)),
                                   DelaySeconds=max(0, min(900, int(delay_s))))
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("SQS is unavailable.", field="queue") from exc
