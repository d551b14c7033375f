"""One dependency resolution: uv.lock pins what every layer and the development venv install."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from infercrane.adapters.library_patches import WRITTEN_FOR
from infercrane.local.lock import without
from infercrane.local.template import StackTemplate, load

REPO = Path(__file__).resolve().parents[2]
# Libraries whose internals the code patches (adapters/library_patches.py gates every patch):
# one exact version, the one the patches were checked on.
PATCHED = tuple(WRITTEN_FOR)


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]).lower()


@pytest.fixture(scope="module")
def tpl() -> StackTemplate:
    return load(REPO / "template.yaml")


@pytest.fixture(scope="module")
def locked() -> dict[str, list[str]]:
    """Each locked distribution's versions (more than one only where the resolution forks)."""
    versions: dict[str, list[str]] = {}
    for package in tomllib.loads((REPO / "uv.lock").read_text())["package"]:
        versions.setdefault(package["name"], []).append(package["version"])
    return versions


def _pins(uri: str) -> dict[str, str]:
    lines = [ln.split(";")[0].strip() for ln in (REPO / uri / "requirements.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert all("==" in ln for ln in lines), f"{uri}/requirements.txt: a line without a pin"
    return {_name(ln): ln.split("==")[1] for ln in lines}


def test_every_layer_pins_the_locked_version_of_each_distribution_it_installs(tpl, locked):
    assert tpl.layers, "template.yaml declares no layers"
    for lid, uri in tpl.layers.items():
        for name, version in _pins(uri).items():
            assert version in locked.get(name, []), f"{lid}: {name}=={version} is not what uv.lock holds"


def test_each_layer_installs_what_pyproject_declares_for_it_at_shared_layers_versions(tpl):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    shared = _pins("shared")
    assert {_name(r) for r in project["dependencies"]} <= set(shared)
    for lid, uri in tpl.layers.items():
        if uri == "shared":
            continue
        declared = project["optional-dependencies"]["layer-" + Path(uri).name.replace("_", "-")]
        mine = _pins(uri)
        # What SharedLayer installs is mounted under every provider layer: never installed again.
        assert {_name(r) for r in declared} <= set(mine) | set(shared), lid
        assert {n: v for n, v in mine.items() if shared.get(n, v) != v} == {}, lid


def test_the_patched_libraries_have_one_locked_version_and_the_venv_runs_it(locked):
    for name in PATCHED:
        assert len(locked[name]) == 1, f"{name}: uv.lock holds {locked[name]}"
        assert metadata.version(name) == locked[name][0], (
            f"{name} {metadata.version(name)} is installed, uv.lock says {locked[name][0]}: "
            "run `make install`")


def test_a_provider_layer_leaves_out_the_pins_shared_layer_installs_below_it():
    shared = ["botocore==1.44.8", "python-dateutil==2.9.0.post0", "cffi==2.1.1 ; os_name != 'nt'"]
    kube = ["cffi==2.1.1 ; sys_platform == 'linux'", "kubernetes==37.0.1",
            "python-dateutil==2.9.0.post0"]
    # The same pin under another marker is kept: SharedLayer may not install it where this does.
    assert without(kube, shared) == ["cffi==2.1.1 ; sys_platform == 'linux'", "kubernetes==37.0.1"]


def test_the_runtime_check_names_lambdas_platform_as_uv_does():
    from infercrane.local.artifacts import RUNTIME_PLATFORM
    from infercrane.local.lock import _uv_platform

    assert _uv_platform(RUNTIME_PLATFORM) == "aarch64-manylinux2014"
    assert _uv_platform("manylinux_2_28_x86_64") == "x86_64-manylinux_2_28"


def _runtime_environment() -> dict[str, str]:
    """Lambda's marker environment (template.yaml's python3.12 on arm64), from artifacts' one
    definition of the runtime."""
    from infercrane.local.artifacts import RUNTIME_PLATFORM, RUNTIME_VERSION

    machine = "aarch64" if RUNTIME_PLATFORM.endswith("aarch64") else "x86_64"
    return {"python_version": RUNTIME_VERSION, "python_full_version": f"{RUNTIME_VERSION}.0",
            "implementation_version": f"{RUNTIME_VERSION}.0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "platform_machine": machine,
            "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_release": "", "platform_version": ""}


def test_each_functions_layers_hold_every_locked_requirement_on_lambdas_runtime(tpl):
    # The artifacts built here are for this interpreter; what `sam build` installs from the same
    # pins is for Lambda's. From uv.lock's own dependency graph, with markers evaluated for the
    # runtime: every distribution a function's layers install finds what it requires in them.
    from packaging.markers import Marker

    env = _runtime_environment()
    lock = tomllib.loads((REPO / "uv.lock").read_text())["package"]
    graph = {(p["name"], p["version"]): p for p in lock}
    project = next(p for p in lock if p["name"] == "infercrane")

    def applies(dep: dict) -> bool:
        return "marker" not in dep or Marker(dep["marker"]).evaluate(env)

    missing = {}
    for lid, spec in tpl.functions.items():
        pins: dict[str, str] = {}
        for layer in spec.layers:
            for line in (REPO / tpl.layers[layer] / "requirements.txt").read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    pin, _, marker = line.partition(";")
                    if not marker.strip() or Marker(marker).evaluate(env):
                        pins[_name(pin)] = pin.split("==")[1].strip()
        extras = [Path(tpl.layers[x]).name.replace("_", "-") for x in spec.layers]
        todo = [d for d in project["dependencies"] if applies(d)]
        todo += [d for x in extras for d in project["optional-dependencies"].get(f"layer-{x}", [])
                 if applies(d)]
        todo += [d for n, v in pins.items() for d in graph[(n, v)].get("dependencies", []) if applies(d)]
        for dep in todo:
            if dep["name"] not in pins:
                missing.setdefault(lid, set()).add(dep["name"])
                continue
            owner = graph[(dep["name"], pins[dep["name"]])]
            for extra in dep.get("extra", []):
                todo += [d for d in owner.get("optional-dependencies", {}).get(extra, []) if applies(d)]
    assert missing == {}
