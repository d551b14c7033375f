from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from infercrane.domain.windows import WINDOW_HELP, epoch_ms, parse_until, parse_window, resolve_window
from infercrane.errors import InvalidInput


@pytest.mark.parametrize(("text", "duration"), [
    ("30m", timedelta(minutes=30)), ("24h", timedelta(hours=24)), ("7d", timedelta(days=7)),
    ("720h", timedelta(hours=720)), ("1m", timedelta(minutes=1)), (" 2h ", timedelta(hours=2)),
])
def test_windows_accept_minutes_hours_and_days(text, duration):
    assert parse_window(text) == duration // timedelta(milliseconds=1)


@pytest.mark.parametrize("text", ["", "24", "h", "0h", "-1h", "1.5h", "24 hours", "1w", "24H",
                                  "01h", "9601h", "401d", "CANARY"])
def test_bad_windows_get_a_clear_error_naming_the_field_without_echoing(text):
    with pytest.raises(InvalidInput) as info:
        parse_window(text)
    assert info.value.field == "window"
    # Fixed sentences only: the message can never carry the submitted value.
    assert info.value.message in {WINDOW_HELP, "A window may reach back at most 400 days (9600h)."}


def test_window_ends_at_until_truncated_to_the_millisecond():
    until = datetime(2026, 11, 29, 20, 0, 0, 123_999, tzinfo=UTC)
    window = resolve_window("30m", until, now=datetime(2030, 1, 1, tzinfo=UTC))
    assert window.end_ms == int(datetime(2026, 11, 29, 20, 0, 0, 123_000, tzinfo=UTC).timestamp() * 1000)
    assert window.duration_ms == 30 * 60 * 1000


def test_window_ends_now_without_until():
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    window = resolve_window("24h", None, now)
    assert window.end_ms == epoch_ms(now)
    assert window.start_ms == epoch_ms(now - timedelta(hours=24))


def test_until_with_an_offset_is_the_same_instant_in_utc():
    plus_two = parse_until("2026-11-29T22:00:00+02:00")
    assert epoch_ms(plus_two) == epoch_ms(datetime(2026, 11, 29, 20, 0, tzinfo=UTC))


@pytest.mark.parametrize("text", ["2026-11-29T20:00:00", "yesterday", "2026-13-01T00:00:00Z"])
def test_until_must_be_an_rfc3339_time_with_a_timezone(text):
    with pytest.raises(InvalidInput) as info:
        parse_until(text)
    assert info.value.field == "until"
