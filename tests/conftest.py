"""Fixtures shared by every tier. Paths only: no I/O here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout: material handed to the project (real traces, references).
SHARED_DATA = REPO.parent / "shared" / "data"
EVENTS = REPO / "events"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def template_path() -> Path:
    return REPO / "template.yaml"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the shared traces are not beside this checkout ({SHARED_DATA})")
    return SHARED_DATA


def load_event(name: str) -> dict[str, Any]:
    """One of the events/*.json files that `sam local invoke` uses too."""
    return json.loads((EVENTS / name).read_text())
