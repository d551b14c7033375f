"""EventBridge target: the control plane's lifecycle attempts from `ControlPlaneBus`.

Only producers admitted by the bus's resource policy (template.yaml) can put events there; the
tenant is taken from the event's detail as documented in docs/capacity.md. The same domain ingest
as `POST /v1/lifecycle-attempts` stores them (idempotent on attempt id). Storage errors raise, so
EventBridge retries and finally dead-letters the event only if every item passed its checks;
malformed events (or events with an invalid item) are dropped and counted, never retried."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from infercrane.bootstrap import get_container
from infercrane.clock import utcnow

logger = Logger()


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    container = get_container()
    # EventBridge's envelope ends here: the domain reads the detail, the control plane's batch
    # `{"tenant", "items"}` (docs/capacity.md); anything but a detail object is dropped there.
    result = container.capacity.ingest_control_plane(event.get("detail"), utcnow(),
                                                     container.directory.tenant_exists)
    logger.info("lifecycle attempts", extra={k: result[k] for k in ("accepted", "rejected", "dropped")})
    return result
