"""Dead-letter inspection and redrive (admin). Inspection shows metadata only: sizes, counts and
message attributes, never a message body, so operators can triage without reading payloads."""

from __future__ import annotations

from infercrane.errors import InvalidInput, NotFound
from infercrane.ports.queues import DeadLetter, QueueAdmin, QueueDepth


class DlqService:
    def __init__(self, queues: QueueAdmin):
        self._queues = queues

    def _check(self, name: str) -> str:
        if name not in self._queues.names():
            raise NotFound("No such queue; see `infercrane admin dlq list`.", field="queue")
        return name

    def depths(self) -> list[QueueDepth]:
        return [self._queues.depth(n) for n in self._queues.names()]

    def show(self, name: str, limit: int = 10) -> tuple[QueueDepth, list[DeadLetter]]:
        self._check(name)
        if not 1 <= limit <= 10:
            raise InvalidInput("limit must be between 1 and 10.", field="limit")
        return self._queues.depth(name), self._queues.peek_dead_letters(name, limit)

    def redrive(self, name: str, limit: int = 1000) -> int:
        self._check(name)
        if not 1 <= limit <= 10000:
            raise InvalidInput("limit must be between 1 and 10000.", field="limit")
        return self._queues.redrive(name, limit)
