"""What a function's cold start imports: importing a handler loads only what its first call may need.

Each handler is imported in a fresh interpreter (as Lambda does) and its `sys.modules` read; the
oracle is the set of modules named here, not the code's own lists. No timing is asserted.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

TENANT_ROUTES = [f"infercrane.http.routes.{area}"
                 for area in ("traces", "cache", "capture", "capacity", "executions")]
PROVIDER_SDKS = ["google.cloud.compute_v1", "google.auth", "kubernetes"]

_PROBE = """
import importlib.util, json, sys
shared, folder = sys.argv[1:3]
sys.path[:0] = [folder, shared]
spec = importlib.util.spec_from_file_location("app", folder + "/app.py")
module = importlib.util.module_from_spec(spec)
sys.modules["app"] = module
spec.loader.exec_module(module)
print(json.dumps(sorted(sys.modules)))
"""


@functools.cache  # one interpreter per handler, however many tests read it
def modules_after_import(function: str) -> frozenset[str]:
    """The modules loaded once `functions/<function>/app.py` is imported in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _PROBE, str(REPO / "shared"), str(REPO / "functions" / function)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return frozenset(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: frozenset[str], names: list[str]) -> list[str]:
    """Which of `names` (packages included: `kubernetes` covers `kubernetes.client`) are loaded."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def test_admin_handler_does_not_import_the_tenant_routes() -> None:
    modules = modules_after_import("admin")
    assert "infercrane.http.routes.admin" in modules
    assert loaded(modules, TENANT_ROUTES) == []
    # Nor the tenant areas' domain behind those routes.
    assert loaded(modules, ["infercrane.domain.capture", "infercrane.domain.capacity",
                            "infercrane.domain.replay", "infercrane.domain.otlp"]) == []


def test_api_handler_imports_every_tenant_route() -> None:
    # The other side of the admin's laziness: the api still serves every area.
    assert loaded(modules_after_import("api"), TENANT_ROUTES) == TENANT_ROUTES


@pytest.mark.parametrize("function", ["authorizer", "admin", "aggregate", "cache_sweep",
                                      "lifecycle", "prefetch_dispatch", "trace_build", "capture",
                                      "adapter_aws", "adapter_gcp", "adapter_kubernetes"])
def test_handler_import_leaves_pynamodb_to_the_first_table_call(function: str) -> None:
    assert loaded(modules_after_import(function), ["pynamodb"]) == []


def test_authorizer_imports_no_route_batch_or_provider_code() -> None:
    modules = modules_after_import("authorizer")
    assert loaded(modules, ["infercrane.http", "aws_lambda_powertools.event_handler",
                            "aws_lambda_powertools.utilities.batch", *PROVIDER_SDKS]) == []


@pytest.mark.parametrize("function", ["adapter_aws", "adapter_gcp", "adapter_kubernetes"])
def test_adapter_import_leaves_the_provider_sdk_to_the_first_provider_call(function: str) -> None:
    # A message that ends before any provider call (unknown or finished request) needs no SDK.
    assert loaded(modules_after_import(function), PROVIDER_SDKS) == []
