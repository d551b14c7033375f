"""Ports: import records (one per deployment and file) and removing one import's observations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class ImportStore(Protocol):
    def get(self, tenant: str, deployment: str, file_sha256: str) -> dict[str, Any] | None:
        """The record of this file's import into the deployment, or None."""

    def put(self, tenant: str, record: Mapping[str, Any], replacing: str | None) -> bool:
        """Store the record. `replacing` None: only if there is none; else only if the stored
        record has that import id. False, changing nothing, when the condition fails."""


class ImportedObservations(Protocol):
    def delete_import(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                      id_prefix: str) -> int:
        """Delete the observations with start_ms <= arrival < end_ms whose id starts with
        `id_prefix` (one import's); the number deleted."""
