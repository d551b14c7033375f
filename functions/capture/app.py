"""Queue consumer (implemented by its capability issue). Until then every message is reported as
failed, so nothing is lost: SQS retries it and finally moves it to the DLQ."""

from __future__ import annotations

from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event.get("Records", [])]}
