"""Deployment artifacts, laid out as `sam build` lays them out, for the interpreter at hand.

`.aws-sam/build/<FunctionLogicalId>/` holds a function's CodeUri; `.aws-sam/build/<LayerLogicalId>/
python/` holds a layer (what Lambda mounts at /opt/python). A function's artifact is its folder
plus the python/ folders of the layers it names (Globals first), in that order on `sys.path`.

What goes into each layer is declared in pyproject.toml and resolved once, for every layer and
the development venv together, in uv.lock (`infercrane.local.lock`):
- SharedLayer (ContentUri `shared/`): `[project] dependencies`, plus the `infercrane` package
  minus what no deployed function imports (`RUNTIME_EXCLUDE`).
- every other layer (ContentUri `layers/<name>/`): the `layer-<name>` extra, less SharedLayer's.
`requirements.txt` beside each layer is that part of the lock, every version pinned (it is what
`sam build` reads, installed with `--no-deps`), regenerated at each build.

Dependencies are installed by uv for the interpreter at hand (`uv pip install --target`), so the
artifact imports here on any Python the project supports; `sam build` itself builds the
arm64/3.12 one for deployment, at the same versions. Installed dependency sets are cached by the
hash of their requirements and Python version (shared by every checkout of this user), and every
artifact is rebuilt only when the hash of its inputs changes. This module uses only the standard
library: `sam build` runs it from shared/Makefile to build SharedLayer.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercrane.local import lock
from infercrane.local.lock import RUNTIME_PLATFORM, RUNTIME_VERSION

PACKAGE = "infercrane"
SHARED_URI = "shared"
LAYER_EXTRA_PREFIX = "layer-"
# Parts of the package that no deployed function imports: the workstation CLI, the local stack
# and this builder, qualification, the AIPerf runner and its formats and the API reporter (the
# CLI's), and the generators and importers behind CLI commands. The packaging check proves nothing needs them.
RUNTIME_EXCLUDE = (
    "cli", "local", "qualify",
    "adapters/aiperf_runner.py", "adapters/aiperf_format.py", "adapters/api_reporter.py",
    "domain/capacity_synth.py", "domain/importers.py",
)
GENERATED_HEADER = ("# Generated from pyproject.toml and uv.lock by `make install` (infercrane local "
                    "build); do not edit.\n")
COMPILE_ARGS = ("-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash")
_SKIP = ("__pycache__", ".pyc", ".pyo", ".DS_Store")
Log = Callable[[str], None]


class BuildError(Exception):
    pass


@dataclass(frozen=True)
class Artifact:
    """One function's deployed code: its folder first, then its layers' python/ folders."""

    logical_id: str
    handler: str
    paths: tuple[Path, ...]

    def exists(self) -> bool:
        return all(p.is_dir() for p in self.paths)


def build_dir(template_path: Path) -> Path:
    return template_path.resolve().parent / ".aws-sam" / "build"


def artifact(template_path: Path, spec: Any) -> Artifact:
    """`spec` is an `infercrane.local.template.FunctionSpec`."""
    out = build_dir(template_path)
    return Artifact(spec.logical_id, spec.handler,
                    (out / spec.logical_id, *(out / layer / "python" for layer in spec.layers)))


# -- requirements: pyproject.toml is the source --------------------------------------------------
def _project_root(folder: Path) -> Path:
    """The checkout a layer folder belongs to (a template may sit elsewhere, e.g. a test's)."""
    for candidate in (folder, *folder.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    raise BuildError(f"{folder}: no pyproject.toml above it")


def is_shared_layer(root: Path, content_uri: str) -> bool:
    folder = (root / content_uri).resolve()
    return folder == _project_root(folder) / SHARED_URI


def _layer_extra(root: Path, content_uri: str) -> str | None:
    """The pyproject extra a layer holds; None for SharedLayer (`[project] dependencies`)."""
    if is_shared_layer(root, content_uri):
        return None
    extra = LAYER_EXTRA_PREFIX + Path(content_uri).name.replace("_", "-")
    folder = (root / content_uri).resolve()
    project = tomllib.loads((_project_root(folder) / "pyproject.toml").read_text())["project"]
    if extra not in project.get("optional-dependencies", {}):
        raise BuildError(f"layer {content_uri}: pyproject.toml has no extra [{extra}] "
                         "listing what it holds")
    return extra


def layer_requirements(root: Path, content_uri: str) -> list[str]:
    """What pyproject.toml declares for a layer (ranges: what the layer promises)."""
    folder = (root / content_uri).resolve()
    project = tomllib.loads((_project_root(folder) / "pyproject.toml").read_text())["project"]
    extra = _layer_extra(root, content_uri)
    return list(project["dependencies"] if extra is None else project["optional-dependencies"][extra])


def requirements_text(root: Path, content_uri: str) -> str:
    """A layer's requirements.txt: its part of uv.lock, every line pinned."""
    extra = _layer_extra(root, content_uri)
    try:
        pins = lock.layer_pins(_project_root((root / content_uri).resolve()), extra)
    except lock.LockError as exc:
        raise BuildError(str(exc)) from exc
    what = ("[project] dependencies" if extra is None else
            f"the [{extra}] extra, less SharedLayer's (mounted under it)")
    return (GENERATED_HEADER + f"# uv.lock's pins of {what}; installed with --no-deps.\n"
            + "".join(f"{r}\n" for r in pins))


def deploy_pip_args(python_version: str = RUNTIME_VERSION,
                    platform: str = RUNTIME_PLATFORM) -> list[str]:
    """pip's arguments for a deployed layer: the lock's pins as they are (no resolution), the
    runtime's wheels whatever machine builds, and no bytecode from pip's own interpreter (the
    runtime's Python compiles it)."""
    return ["--no-deps", "--platform", platform, "--implementation", "cp",
            "--python-version", python_version, "--only-binary=:all:", "--no-compile"]


def layer_makefile_text(logical_id: str) -> str:
    """`sam build`'s step for a provider layer (BuildMethod makefile): its requirements as
    SharedLayer's are built, with no infercrane code (the folder holds none to run)."""
    target = '"$(ARTIFACTS_DIR)/python"'
    return (GENERATED_HEADER
            + "# sam build runs this (template.yaml: BuildMethod makefile): arm64/CPython 3.12 "
            "wheels, and their\n# bytecode compiled by python3.12 (Lambda's folders are "
            "read-only: without it every cold start compiles).\n"
            f"build-{logical_id}:\n"
            f"\tpython3 -m pip install --quiet --disable-pip-version-check --target {target} "
            f"-r requirements.txt {' '.join(deploy_pip_args())}\n"
            f"\tpython{RUNTIME_VERSION} {' '.join(COMPILE_ARGS)} {target}\n")


def sync_requirements(root: Path, layers: dict[str, str]) -> list[Path]:
    """Write each layer's requirements.txt from pyproject.toml, and each provider layer's build
    Makefile; the paths that changed."""
    changed = []
    for lid, uri in layers.items():
        files = {"requirements.txt": requirements_text(root, uri)}
        if not is_shared_layer(root, uri):
            files["Makefile"] = layer_makefile_text(lid)
        for name, text in files.items():
            path = root / uri / name
            if not path.is_file() or path.read_text() != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                changed.append(path)
    return changed


# -- hashing inputs ---------------------------------------------------------------------------
def _files(folder: Path, exclude: tuple[str, ...] = ()) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_dir() or any(part in _SKIP or part.endswith(_SKIP) for part in path.parts):
            continue
        if any(rel == x or rel.startswith(x + "/") for x in exclude):
            continue
        yield path


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _tree_digest(folder: Path, exclude: tuple[str, ...] = ()) -> str:
    return _digest(*(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes()
                     for p in _files(folder, exclude)))


def _python_tag(python: str) -> str:
    if python == sys.executable:
        import sysconfig

        return f"{sys.implementation.cache_tag} {sysconfig.get_platform()}"
    code = "import sys, sysconfig; print(sys.implementation.cache_tag, sysconfig.get_platform())"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)  # noqa: S603
    return out.stdout.strip()


# -- building ---------------------------------------------------------------------------------
def deps_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "infercrane" / "layer-deps"


def _pip_install(python: str, requirements: Path, target: Path, platform_args: list[str]) -> None:
    """sam build's install (pip, wherever SAM runs): the pins as they are, resolved by the lock."""
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--target", str(target), "-r", str(requirements), *platform_args]
    _run(cmd, f"pip install -r {requirements}")


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise BuildError(f"{what} failed:\n{done.stdout}{done.stderr}")


def _installed_deps(python: str, tag: str, requirements: Path, log: Log) -> Path | None:
    """A folder holding `requirements` installed for `python`, from the shared cache."""
    lines = [ln for ln in requirements.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if not lines:
        return None
    # The installer takes part in the key: sets pip resolved (before the lock) stay apart.
    folder = deps_cache() / _digest(tag.encode(), b"uv --no-deps", "\n".join(lines).encode())[:24]
    if not (folder / ".complete").is_file():
        log(f"installing {requirements} for {tag} (uv pip install --target, {len(lines)} pins) ...")
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            lock.install(python, requirements, tmp)
        except lock.LockError as exc:
            raise BuildError(str(exc)) from exc
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        (folder / ".complete").write_text("\n".join(lines) + "\n")
    return folder


def compile_bytecode(python: str, folders: list[Path]) -> None:
    """Write `python`'s bytecode beside every source file under `folders`, as the artifact ships.

    Lambda's code and layer folders are read-only, so a module without bytecode for the runtime
    is compiled from its source at every cold start: with none, importing the api function and
    making its DynamoDB client took ~1.2 s here instead of ~0.45 s. Unchecked hashes, because
    the bytecode must be used whatever times the files get in the zip and on Lambda's disk; a
    changed source means a new build, which compiles again."""
    if not folders:
        return
    cmd = [python, *COMPILE_ARGS, *(str(f) for f in folders)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise BuildError(f"compiling {', '.join(map(str, folders))} for {python} failed:\n"
                         f"{done.stdout}{done.stderr}")


def _link_tree(src: Path, dst: Path) -> None:
    """Copy a tree by hard links (instant, no space) where the filesystem allows it."""
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".complete"))


def _copy_code(src: Path, dst: Path, exclude: tuple[str, ...] = ()) -> None:
    for path in _files(src, exclude):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def copy_runtime_package(shared: Path, python_dir: Path) -> None:
    """The infercrane package as deployed: everything but RUNTIME_EXCLUDE."""
    _copy_code(shared / PACKAGE, python_dir / PACKAGE, RUNTIME_EXCLUDE)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build(template: Any, python: str | None = None, log: Log | None = None) -> list[str]:
    """Build every layer and function of `template` (an `infercrane.local.template.
    StackTemplate`) that is missing or whose inputs changed; the logical ids rebuilt."""
    python = python or sys.executable
    say: Log = log or (lambda _msg: None)
    root = template.path.resolve().parent
    out = build_dir(template.path)
    stamps = out.parent / "build.stamps"
    tag = _python_tag(python)
    rebuilt: list[str] = []
    compiled: list[Path] = []  # our code; uv compiled the dependencies when it installed them
    stamped: dict[Path, str] = {}  # written once compiled: an interrupted build is redone
    # This builder's own source takes part in every input hash: a change in how artifacts are made
    # rebuilds them.
    builder = Path(__file__).read_bytes()
    with _locked(out.parent):
        sync_requirements(root, template.layers)
        stamps.mkdir(parents=True, exist_ok=True)
        # (logical id, source, destination, is a layer, is SharedLayer)
        units: list[tuple[str, Path, Path, bool, bool]] = [
            (lid, root / uri, out / lid / "python", True, is_shared_layer(root, uri))
            for lid, uri in template.layers.items()]
        units += [(lid, root / spec.code_uri, out / lid, False, False)
                  for lid, spec in template.functions.items()]
        for lid, src, dest, is_layer, shared in units:
            if not src.is_dir():
                raise BuildError(f"{lid}: {src} does not exist")
            reqs = src / "requirements.txt"
            inputs = _digest(tag.encode(), builder,
                             _tree_digest(src, RUNTIME_EXCLUDE if shared else ()).encode())
            stamp = stamps / f"{lid}.sha256"
            if dest.is_dir() and stamp.is_file() and stamp.read_text() == inputs:
                continue
            say(f"building {lid} from {src}")
            shutil.rmtree(out / lid, ignore_errors=True)
            dest.mkdir(parents=True)
            deps = _installed_deps(python, tag, reqs, say) if reqs.is_file() else None
            if deps is not None:
                _link_tree(deps, dest)
            if shared:
                copy_runtime_package(src, dest)
                compiled.append(dest / PACKAGE)
            elif not is_layer:  # a function: its code, as SAM copies it
                _copy_code(src, dest)
                compiled.append(dest)
            stamped[stamp] = inputs
            rebuilt.append(lid)
        compile_bytecode(python, compiled)
        for stamp, inputs in stamped.items():
            stamp.write_text(inputs)
        (out / "manifest.json").write_text(json.dumps({
            "python": tag,
            "functions": {lid: [str(p.relative_to(out)) for p in artifact(template.path, spec).paths]
                          for lid, spec in template.functions.items()},
        }, indent=2) + "\n")
    return rebuilt


def sam_layer(artifacts_dir: Path, platform_args: list[str], runtime_python: str) -> None:
    """`sam build`'s makefile step for SharedLayer: run from a copy of shared/. Bytecode comes
    from the runtime's Python (`runtime_python`), not pip's interpreter, whose bytecode Lambda's
    would ignore."""
    python_dir = artifacts_dir / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    _pip_install(sys.executable, Path("requirements.txt"), python_dir, platform_args)
    copy_runtime_package(Path.cwd(), python_dir)
    compile_bytecode(runtime_python, [python_dir])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=sam_layer.__doc__)
    parser.add_argument("artifacts_dir", type=Path)
    parser.add_argument("--platform", default=RUNTIME_PLATFORM)
    parser.add_argument("--python-version", default=RUNTIME_VERSION)
    args = parser.parse_args(argv)
    # sam build finds the same interpreter on PATH for every python3.12 function it builds.
    runtime = shutil.which(f"python{args.python_version}")
    if runtime is None:
        print(f"python{args.python_version} is not on PATH: the layer's bytecode must come from "
              "the Lambda runtime's Python version", file=sys.stderr)
        return 1
    try:
        sam_layer(args.artifacts_dir, deploy_pip_args(args.python_version, args.platform),
                  runtime)
    except BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
