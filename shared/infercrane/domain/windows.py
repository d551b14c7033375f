"""Trace windows: `30m`, `24h`, `7d`, `720h` -> a half-open interval [start, end) in epoch ms.

A window ends at `until` (default: now) and reaches back by its duration. Arrival precision is the
millisecond, truncated, so both ends are whole milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from infercrane.domain.validation import check_time
from infercrane.errors import InvalidInput

_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^([1-9][0-9]{0,6})([mhd])$")
# Observations live at most 400 days (Settings.retention_days); a longer window reads nothing more.
MAX_WINDOW_MS = 400 * 86_400_000
# The most requests one trace keeps from its window (the earliest). Here rather than in replay.py:
# the api's route models bound their fields with it without importing the trace builder.
MAX_REQUESTS_LIMIT = 100_000

WINDOW_HELP = "A window is a whole number followed by m, h or d, for example 30m, 24h, 7d or 720h."


@dataclass(frozen=True)
class Window:
    start_ms: int
    end_ms: int

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


def parse_window(text: str, *, field: str = "window") -> int:
    """The window's duration in milliseconds."""
    if not isinstance(text, str):
        raise InvalidInput(WINDOW_HELP, field=field)
    match = _PATTERN.match(text.strip())
    if match is None:
        raise InvalidInput(WINDOW_HELP, field=field)
    duration = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if duration > MAX_WINDOW_MS:
        raise InvalidInput("A window may reach back at most 400 days (9600h).", field=field)
    return duration


def epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds, truncated (never rounded), of a timezone-aware datetime."""
    if moment.tzinfo is None:
        raise InvalidInput("Must carry a timezone (use Z for UTC).", field="until")
    delta = moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def parse_until(text: str, *, field: str = "until") -> datetime:
    """An RFC 3339 timestamp with a timezone (`2026-11-29T20:00:00Z`)."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except (ValueError, AttributeError):
        raise InvalidInput("Must be an RFC 3339 timestamp.", field=field) from None
    return check_time(moment, field)


def resolve_window(window: str, until: datetime | None, now: datetime) -> Window:
    duration = parse_window(window)
    end_ms = epoch_ms(until if until is not None else now)
    return Window(end_ms - duration, end_ms)


def from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=(ms % 1000) * 1000)
