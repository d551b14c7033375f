"""Consumes PrefetchQueue: `{"tenant", "request_id"}` of a persisted prefetch request -> the
request is sent to its adapter's transport and marked dispatched. The queue is internal (only the
api and cache_sweep functions may send to it, by IAM), so its messages are trusted."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, ConfigDict, ValidationError

from infercrane.bootstrap import get_container
from infercrane.errors import InvalidInput, NotFound

logger = Logger()
processor = BatchProcessor(event_type=EventType.SQS)


class DispatchMessage(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)
    tenant: str
    request_id: str


def record_handler(record: SQSRecord) -> None:
    try:
        message = DispatchMessage.model_validate_json(record.body)
        get_container().prefetch.dispatch(message.tenant, message.request_id)
    except (ValidationError, InvalidInput, NotFound):
        # Nothing to dispatch, now or later: acknowledge instead of cycling it to the DLQ.
        logger.warning("dropped a prefetch message that names no request")


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler,
                                    processor=processor, context=context)
