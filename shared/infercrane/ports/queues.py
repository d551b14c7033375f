"""Port: operating the service's queues and their dead-letter queues."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class QueueDepth:
    name: str
    visible: int
    in_flight: int
    dlq_visible: int


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    receive_count: int
    sent_at_ms: int
    size_bytes: int
    attributes: dict[str, str]


class QueueAdmin(Protocol):
    def names(self) -> list[str]: ...

    def depth(self, name: str) -> QueueDepth: ...

    def peek_dead_letters(self, name: str, limit: int) -> list[DeadLetter]:
        """Inspect without consuming (messages become visible again at once)."""

    def redrive(self, name: str, limit: int) -> int:
        """Move up to `limit` dead letters back to the source queue; returns how many moved."""
