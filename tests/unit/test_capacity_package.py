"""The capacity package's public names: what the type checker reads and what the package hands out at
run time are the same names from the same modules, and a name is loaded only when asked for, so each
entry point's cold start loads only its own part of the package (the module names below are the
oracle, written here). No timing is asserted: the figures are in the report of issue 29's split."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys

import pytest

import infercrane.domain.capacity as capacity
from tests.conftest import REPO

INIT = REPO / "shared" / "infercrane" / "domain" / "capacity" / "__init__.py"


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
    assert sorted(declared) == sorted(capacity.__all__)
    for name, module in declared.items():
        home = importlib.import_module(module)
        assert getattr(capacity, name) is getattr(home, name), name


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchName"):
        capacity.NoSuchName  # noqa: B018


_PROBE = """
import json, sys
from datetime import UTC, datetime
sys.path[:0] = sys.argv[1:3]
loaded = lambda: sorted(m for m in sys.modules if m.startswith("infercrane.domain.capacity."))
out = {}
import infercrane.domain.capacity
out["package"] = loaded()
from infercrane.domain.capacity import CapacityService
from tests.support.capacity_memory import MemoryCapacityStore
svc = CapacityService(MemoryCapacityStore())
now = datetime(2026, 11, 29, 20, 30, tzinfo=UTC)
if sys.argv[3] in ("ingest", "report"):
    with open(sys.argv[1] + "/events/lifecycle_eventbridge.json") as f:
        detail = json.load(f)["detail"]
    out["accepted"] = svc.ingest_control_plane(detail, now, lambda t: True)["accepted"]
if sys.argv[3] == "report":
    out["before_report"] = loaded()
    out["tail_hours"] = svc.report("acme", "24h", None, None, now)["read"]["tail_hours"]
elif sys.argv[3] == "aggregate":
    svc.aggregate(now)
out["call"] = loaded()
print(json.dumps(out))
"""


def _loaded(call: str) -> dict[str, list[str]]:
    done = subprocess.run([sys.executable, "-I", "-c", _PROBE, str(REPO), str(REPO / "shared"), call],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _short(modules: list[str]) -> set[str]:
    return {m.rpartition(".")[2] for m in modules}


def test_importing_the_package_loads_none_of_its_modules_and_ingest_leaves_out_aggregate_and_report():
    seen = _loaded("ingest")
    assert seen["package"] == []
    assert seen["accepted"] == 2
    assert {"service", "intake"} <= _short(seen["call"])
    assert not {"aggregate", "report"} & _short(seen["call"])


def test_an_aggregator_run_never_loads_the_attempts_input_model_or_the_report():
    called = _short(_loaded("aggregate")["call"])
    assert {"service", "aggregate"} <= called
    assert not {"intake", "report"} & called


def test_a_report_rolling_up_its_tail_loads_the_report_and_not_the_aggregator():
    seen = _loaded("report")
    assert "report" not in _short(seen["before_report"])
    assert seen["tail_hours"] == 1  # the ingested hour is read from its attempts
    assert "report" in _short(seen["call"])
    assert "aggregate" not in _short(seen["call"])
