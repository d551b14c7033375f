"""Fixtures shared by every tier. Paths only: no I/O here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# The two public traces, vendored with their attribution (identical to ../shared/data).
SHARED_DATA = REPO / "tests" / "fixtures" / "traces"
EVENTS = REPO / "events"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def template_path() -> Path:
    return REPO / "template.yaml"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


def load_event(name: str) -> dict[str, Any]:
    """One of the events/*.json files that `sam local invoke` uses too."""
    return json.loads((EVENTS / name).read_text())
