"""Time, in one place, so tests and properties can drive it."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(dt: datetime) -> str:
    """RFC 3339 UTC with millisecond precision and `Z` (truncated, never rounded)."""
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
