"""Scheduled function (implemented by its capability issue)."""

from __future__ import annotations

from typing import Any


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"processed": 0}
