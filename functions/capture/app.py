"""Consumes CaptureQueue: gateway-signed observation messages -> observations.

Each message is verified with its tenant's ingest key before its body is read. Unsigned, badly
signed, malformed and body-carrying messages are consumed and counted (retrying them could only
carry them into the DLQ); only a transient failure (keyring or table unavailable) is reported as a
partial batch failure. Verified observations of the whole batch are stored in one write.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from infercrane.bootstrap import get_container
from infercrane.domain.capture import QueueMessage

logger = Logger()
metrics = Metrics()
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def _message(record: SQSRecord) -> QueueMessage:
    attrs = record.raw_event.get("messageAttributes") or {}
    return QueueMessage(record.message_id, record.body or "",
                        {k: str(v.get("stringValue") or "") for k, v in attrs.items()})


@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    intake = get_container().capture.queue_intake()

    def record_handler(record: SQSRecord) -> str:
        return intake.accept(_message(record))

    response = process_partial_response(event=event, record_handler=record_handler,
                                        processor=processor, context=context)
    retry, stats = intake.commit()
    failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])} | set(retry)
    for name, value in {**intake.verdicts, **intake.items}.items():
        metrics.add_metric(name=f"Capture_{name}", unit=MetricUnit.Count, value=value)
    metrics.add_metric(name="ObservationWriteRequests", unit=MetricUnit.Count, value=stats.requests)
    # Counts and fixed verdict names only: never a body, an attribute value or an identity.
    logger.info("capture batch", extra={"messages": len(event.get("Records", [])),
                                        "verdicts": dict(intake.verdicts), "items": dict(intake.items),
                                        "written": stats.items, "retry": len(failed)})
    return {"batchItemFailures": [{"itemIdentifier": m} for m in sorted(failed)]}
