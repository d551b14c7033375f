"""The one dependency resolution: uv.lock, and each layer's part of it.

uv resolves pyproject.toml's runtime dependencies, every extra and the test tools together into
uv.lock (`make lock`), for every Python and platform the project supports: the development venv
and Lambda's Python 3.12 arm64 get the same versions. Resolving each layer alone let
KubernetesLayer bring python-dateutil 4 over SharedLayer's 2.9, outside botocore's `<3`.

Each layer's requirements.txt is its part of the lock, every line pinned, installed without
resolving again (`--no-deps`): SharedLayer holds the closure of `[project] dependencies`; a
provider layer (the `layer-<name>` extra) holds the closure of its extra less what SharedLayer
holds, since every function mounts SharedLayer under it. No distribution is then in two of a
function's layers at two versions. This module uses only the standard library (see artifacts).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

LOCK_FILE = "uv.lock"
# The one command that brings uv.lock back in line with pyproject.toml (Makefile: `lock`).
REFRESH = "make lock"


class LockError(Exception):
    pass


def uv_binary() -> str:
    """The venv's uv (make install puts the lock's version beside the venv's Python), else PATH's."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        raise LockError("uv is not installed: run `make install`")
    return found


def export(root: Path, extra: str | None = None) -> list[str]:
    """The pinned requirement lines (`name==version[ ; marker]`) of `[project] dependencies`, plus
    `extra`'s, as locked. Fails when uv.lock is stale against pyproject.toml."""
    cmd = [uv_binary(), "export", "--project", str(root), "--locked", "--offline", "--no-dev",
           "--no-hashes", "--no-header", "--no-annotate", "--no-emit-project", "--quiet"]
    if extra is not None:
        cmd += ["--extra", extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise LockError(f"{root / LOCK_FILE} cannot be read for {extra or 'the runtime'} (stale "
                        f"against pyproject.toml? run `{REFRESH}`):\n{done.stderr}")
    return [line.strip() for line in done.stdout.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def layer_pins(root: Path, extra: str | None) -> list[str]:
    """A layer's requirements: SharedLayer's (extra None) or a provider layer's, less SharedLayer's."""
    shared = export(root)
    if extra is None:
        return shared
    return without(export(root, extra), shared)


def without(lines: list[str], installed_below: list[str]) -> list[str]:
    """`lines` less those a lower layer already installs at the same pin (and marker)."""
    below = set(installed_below)
    return [line for line in lines if line not in below]
