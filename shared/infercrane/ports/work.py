"""Port: per-tenant work buckets (domain/work.py), one atomic charge per call."""

from __future__ import annotations

from typing import Protocol


class WorkBuckets(Protocol):
    def advance(self, tenant: str, *, now_ms: int, cost_ms: int, latest_ms: int,
                known_ms: int) -> tuple[bool, int]:
        """Atomically move the tenant's theoretical arrival time `tat` (absent: `now_ms`) to
        max(tat, now_ms) + cost_ms if that is at most `latest_ms`: (True, the new tat). Else
        change nothing: (False, the current tat). `known_ms` is the latest tat this caller saw,
        a hint for which write to try first."""
