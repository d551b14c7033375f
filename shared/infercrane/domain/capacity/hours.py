"""Hours and UTC days of `started_at` (counted since the epoch), and their sortable keys."""

from __future__ import annotations

from datetime import UTC, datetime

HOUR_MS = 3_600_000
DAY_HOURS = 24


def hour_of(ms: int) -> int:
    return ms // HOUR_MS


def hour_key(hour: int) -> str:
    """`2026-11-29T20`: sorts in time order, readable in the console."""
    return datetime.fromtimestamp(hour * 3600, UTC).strftime("%Y-%m-%dT%H")


def hour_from_key(key: str) -> int:
    return int(datetime.strptime(key, "%Y-%m-%dT%H").replace(tzinfo=UTC).timestamp()) // 3600


def day_of(hour: int) -> int:
    return hour // DAY_HOURS


def day_key(day: int) -> str:
    """`2026-11-29`: sorts in time order."""
    return datetime.fromtimestamp(day * 86400, UTC).strftime("%Y-%m-%d")


def day_from_key(key: str) -> int:
    return int(datetime.strptime(key, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()) // 86400


def rfc(ms: int) -> str:
    dt = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
