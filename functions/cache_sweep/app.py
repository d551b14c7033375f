"""Scheduled every 5 minutes: expired cache observations -> `unknown` (audited), and prefetch
requests overdue in `accepted`/`dispatched` -> re-sent through PrefetchQueue. Due items come from
the sparse `sweep` index (Queries, never a Scan)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from infercrane.bootstrap import get_container

logger = Logger()


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    result = get_container().cache_sweeper.sweep().document()
    logger.info("cache sweep", extra=result)
    return result
