"""Scheduled every 15 minutes: dirty tenant-hours (all tenants) -> hourly capacity rollups.

Pending work comes from the sparse `CAPACITY#DIRTY` partition of gsi1 (Queries, never a Scan);
rollups built by an older classifier version are re-classified from the attempts' raw codes."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from infercrane.bootstrap import get_container
from infercrane.clock import utcnow

logger = Logger()


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    budget = getattr(context, "get_remaining_time_in_millis", None)
    result = get_container().capacity.aggregate(utcnow(), time_left_ms=budget).to_document()
    logger.info("capacity rollups", extra=result)
    return result
