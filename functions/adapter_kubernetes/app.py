"""Kubernetes provider adapter: verify VolumeSnapshots, prefetch ReadOnlyMany PVCs from them,
report cache observations, release what it created. One message = one `AdapterRunner.handle` call.

An invalid message is consumed and logged as `invalid` (retrying could only carry it into the
DLQ). Only a record that raises after verification (a transient provider or store error) is a
batch item failure: SQS redelivers it and, after maxReceiveCount, moves it to the DLQ.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from infercrane.bootstrap import get_container

logger = Logger()
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    outcome = get_container().kubernetes_adapter.handle(record.body)
    logger.info("adapter message handled", extra={"action": outcome.action, "state": outcome.state})


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler,
                                    processor=processor, context=context)
