"""Fixtures shared by every tier. Paths only: no I/O here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.patches import skip_unpatched

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that declare themselves long run first (a longer `timeout` mark, then `slow`),
    each module's tests kept in order. `make test` hands whole modules to its xdist workers in
    this order (--dist loadscope --no-loadscope-reorder): started last, the qualification module
    alone kept one worker busy minutes after the other had finished."""
    def declared(item: pytest.Item) -> tuple[float, bool]:
        timeout = item.get_closest_marker("timeout")
        return (float(timeout.args[0]) if timeout and timeout.args else 0.0,
                item.get_closest_marker("slow") is not None)

    weight: dict[str, tuple[float, bool]] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        weight[module] = max(weight.get(module, (0.0, False)), declared(item))
    items.sort(key=lambda item: tuple(-w for w in weight[item.nodeid.split("::", 1)[0]]))
    skip_unpatched(items)
