"""The journal: every resource a qualification run made, until it is confirmed gone."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from infercrane.domain.providers.message import Target


class Journal:
    """Resources qualification runs created and have not yet seen gone, in a JSON file (None:
    memory only). Written the moment a resource exists, so a crashed run's leftovers are
    listed and removed by the next one."""

    def __init__(self, path: Path | None):
        self.path = path
        self._entries: list[dict[str, str]] = []
        if path is not None and path.is_file():
            self._entries = list(json.loads(path.read_text()).get("resources", []))

    def entries(self, provider: str, *, other_than: str | None = None) -> list[dict[str, str]]:
        return [e for e in self._entries if e["provider"] == provider and e["run"] != other_than]

    def add(self, run_id: str, t: Target, resource_id: str) -> None:
        self._entries.append({"run": run_id, "provider": t.adapter, "tenant": t.tenant,
                              "request_id": t.request_id, "model": t.model,
                              "location": t.location, "source": t.source,
                              "resource_id": resource_id})
        self._save()

    def remove(self, provider: str, resource_id: str) -> None:
        self._entries = [e for e in self._entries
                         if (e["provider"], e["resource_id"]) != (provider, resource_id)]
        self._save()

    @staticmethod
    def target(e: Mapping[str, str]) -> Target:
        return Target.of(e["tenant"], e["request_id"], e["model"], e["provider"], e["location"],
                         e["source"])

    def _save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"resources": self._entries}, indent=1))

