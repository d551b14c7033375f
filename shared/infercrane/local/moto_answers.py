"""moto's DynamoDB read answers written with `json.dumps` for the local stack's moto server.

moto 5.2 writes every response through a generic, shape-driven serializer that costs tens of
microseconds per attribute value, so a 2,000-item page took seconds to encode. Read answers
(GetItem, BatchGetItem, Query, Scan) whose values are plain JSON (strings, numbers, booleans; no
binary attributes, no nulls) are written with `json.dumps` instead; what the SDK parses from both
is compared in `tests/integration/test_local_moto_query.py`. Still paying after observations
moved to segments (issue 27): a 720 h capacity report over 20,000 fresh attempts took 6.2-6.4 s
with it and 26-29 s without it (one of two at API Gateway's 29 s timeout).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from infercrane.adapters.library_patches import may_patch

PATCH = "moto DynamoDB read answers written with json.dumps"
LOST = ("read answers go through moto's serializer, tens of microseconds per attribute "
        "value: large pages (capacity reports) are several times slower")
_installed = threading.Lock()
_original: Callable[..., Any] | None = None
# Answers whose JSON is the result dict itself (DynamoDB's JSON protocol, no wrapper).
_PLAIN_OPERATIONS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan"})


def _holds_null_or_binary(value: Any) -> bool:
    """Whether a result holds a None or a binary attribute value (`B`/`BS`; any key of that name
    counts, even a map's attribute name), walking the structure itself."""
    if value is None:
        return True
    if isinstance(value, dict):
        return any(k in ("B", "BS") or _holds_null_or_binary(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_null_or_binary(v) for v in value)
    return False


def plain_json(result: Any) -> str | None:
    """The result as JSON when the serializer would write it unchanged: no bytes (TypeError
    here), no null and no binary attribute value. Outside strings those are the bare tokens
    `null` and the keys `"B"`/`"BS"`, so text without them is plain; text with them (often only
    inside a string value that holds JSON, such as a rollup's groups) is decided by walking
    the result, which costs far less than the serializer."""
    try:
        text = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None
    if (":null" in text or "[null" in text or ",null" in text or '"B":' in text
            or '"BS":' in text) and _holds_null_or_binary(result):
        return None
    return text


def execute_result(self: Any, context: Any) -> Any:
    assert _original is not None
    text = plain_json(self.result) if context.operation_model.name in _PLAIN_OPERATIONS else None
    if text is None:
        return _original(self, context)
    from moto.core.responses import ActionResult

    # The serializer still decides the status and headers, from an empty answer.
    status, headers, _ = _original(ActionResult({}), context)
    return status, headers, text


def install() -> bool:
    """Route moto's DynamoDB answers through `execute_result` above (idempotent, process-wide);
    True when it is patched, False on a moto it was not checked on (moto's serializer stays)."""
    global _original
    with _installed:
        if _original is not None:
            return True
        if not may_patch(PATCH, "moto", LOST):
            return False
        from moto.dynamodb.responses import DynamoResult

        _original = DynamoResult.execute_result
        DynamoResult.execute_result = execute_result  # type: ignore[method-assign]
        return True


def uninstall() -> None:
    global _original
    from moto.dynamodb.responses import DynamoResult

    with _installed:
        if _original is not None:
            DynamoResult.execute_result = _original  # type: ignore[method-assign]
            _original = None
