"""The capture package's public names: what the type checker reads and what the package hands out at
run time are the same names from the same modules, and a name is loaded only when asked for, so a
caller needing a limit or the item schema (edge, importers, trace files) does not load the ingest
path (the module names below are the oracle, written here)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys

import pytest

import infercrane.domain.capture as capture
from tests.conftest import REPO

INIT = REPO / "shared" / "infercrane" / "domain" / "capture" / "__init__.py"


def _type_checked_names() -> dict[str, str]:
    """name -> module (dotted), from the `if TYPE_CHECKING:` imports of the package's __init__."""
    found: dict[str, str] = {}
    for node in ast.parse(INIT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                found.update({a.name: imp.module for a in imp.names})
    return found


def test_the_type_checker_and_the_run_time_see_the_same_public_names_in_the_same_modules():
    declared = _type_checked_names()
    assert sorted(declared) == sorted(capture.__all__)
    for name, module in declared.items():
        home = importlib.import_module(module)
        assert getattr(capture, name) is getattr(home, name), name


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchName"):
        capture.NoSuchName  # noqa: B018


_PROBE = """
import json, sys
sys.path[:0] = sys.argv[1:2]
loaded = lambda: sorted(m.rpartition(".")[2] for m in sys.modules
                        if m.startswith("infercrane.domain.capture."))
out = {}
import infercrane.domain.capture
out["package"] = loaded()
from infercrane.domain.capture import MAX_LATENCY_MS
out["limit"] = loaded()
out["rfc8785"] = "rfc8785" in sys.modules
from infercrane.domain.capture import CaptureService
out["service"] = loaded()
CaptureService(None, None).queue_intake()
out["queue"] = loaded()
print(json.dumps(out))
"""


def test_each_caller_loads_only_the_modules_it_uses():
    run = subprocess.run([sys.executable, "-c", _PROBE, str(REPO / "shared")], capture_output=True,
                         text=True, check=True)
    loaded = json.loads(run.stdout)
    assert loaded["package"] == []
    assert loaded["limit"] == ["items"] and loaded["rfc8785"] is False
    assert loaded["service"] == ["fingerprint", "items", "prepare", "results", "service"]
    assert loaded["queue"] == ["fingerprint", "items", "prepare", "queue", "results", "service"]
