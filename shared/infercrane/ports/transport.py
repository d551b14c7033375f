"""Port: sending a message to a queue or topic (SQS by default; Pub/Sub for a GCP adapter that
runs as a Cloud Function would sit behind the same port)."""

from __future__ import annotations

from typing import Any, Protocol


class MessageTransport(Protocol):
    def send(self, body: dict[str, Any]) -> str:
        """Send one JSON message; return the transport's message id. Raise
        `DependencyUnavailable` when the transport cannot take it (the caller retries)."""
