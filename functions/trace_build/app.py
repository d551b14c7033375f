"""Consumes TraceBuildQueue: `{"tenant", "build_id"}` of a recorded trace build -> the window is
streamed into a stored trace (docs/trace.md). The queue is internal (only the api function may
send to it, by IAM), so its messages are trusted; one naming no build is dropped, not retried."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, ConfigDict, ValidationError

from infercrane.bootstrap import get_container
from infercrane.clock import utcnow
from infercrane.errors import NotFound

logger = Logger()
processor = BatchProcessor(event_type=EventType.SQS)


class BuildMessage(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True, extra="forbid")
    tenant: str
    build_id: str


def record_handler(record: SQSRecord) -> None:
    try:
        message = BuildMessage.model_validate_json(record.body)
        result = get_container().replay.run_build(message.tenant, message.build_id, utcnow)
    except (ValidationError, NotFound):
        logger.warning("dropped a trace build message that names no build")
        return
    logger.info("trace build finished", extra={"status": result["status"],
                                               "records_read": result.get("records_read")})


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler,
                                    processor=processor, context=context)
