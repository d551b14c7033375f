"""Crash injection for the race and crash tests: a fault hook that kills the write path at one
chosen write boundary, as a process killed between two writes would."""

from __future__ import annotations

from collections.abc import Callable


class Crash(Exception):
    """The injected crash (never raised by the code under test)."""


def crash_after(k: int) -> Callable[[], None]:
    """A hook, called after every write, that raises `Crash` after the k-th."""
    writes = 0

    def fault() -> None:
        nonlocal writes
        writes += 1
        if writes == k:
            raise Crash

    return fault
