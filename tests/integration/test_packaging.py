"""The packaging check: what is deployed is what is tested.

For every function in template.yaml, its artifact (built as `sam build` lays it out, for this
interpreter) is imported in an isolated interpreter (`python -I -S`, only the artifact's folders
on sys.path: the local stack's execution environment) and invoked once with its events/*.json
against moto's server. A function whose artifact lacks a module its code imports fails by name,
even where its handler catches the error (a batch item failure on AWS). Its installed
distributions are checked as `pip check` does, over the artifact as Lambda assembles it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infercrane.local import artifacts, lock
from infercrane.local.runtime import FunctionError, FunctionPool, LogSink
from infercrane.local.template import FunctionSpec, StackTemplate
from tests.conftest import EVENTS, REPO
from tests.emulators.gce import GceEmulator
from tests.emulators.kubernetes import KubernetesEmulator

MODEL = "sha256:" + "ab" * 32
# Where each adapter event's prefetch request points (a request this test creates).
TARGETS = {"aws": ("us-east-1a", "snap-0123456789abcdef0"),
           "gcp": ("us-central1-a", "projects/models/global/snapshots/llama-70b"),
           "kubernetes": ("local/models", "llama-70b")}


def _declared_functions() -> list[str]:
    # Read independently of infercrane.local.template: every AWS::Serverless::Function.
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    doc = yaml.load((REPO / "template.yaml").read_text(), Loader=Loader)
    return sorted(lid for lid, r in doc["Resources"].items()
                  if r["Type"] == "AWS::Serverless::Function")


def event_files(spec: FunctionSpec) -> list[Path]:
    """events/<code folder>_*.json: the events `sam local invoke` is documented with."""
    folders = sorted((p.name for p in (REPO / "functions").iterdir()), key=len, reverse=True)
    mine = []
    for path in sorted(EVENTS.glob("*.json")):
        owner = next((f for f in folders if path.name.startswith(f + "_")), None)
        if owner == spec.short_name:
            mine.append(path)
    return mine


@pytest.fixture(scope="module")
def built(stack_template: StackTemplate) -> StackTemplate:
    artifacts.build(stack_template)
    return stack_template


@pytest.fixture(scope="module")
def providers() -> Iterator[dict[str, str]]:
    gce, k8s = GceEmulator(), KubernetesEmulator()
    gce.start()
    k8s.start()
    yield {"INFERCRANE_GCP_PROJECT": "models", "INFERCRANE_GCP_COMPUTE_ENDPOINT": gce.endpoint,
           "INFERCRANE_KUBERNETES_ENDPOINT": k8s.endpoint}
    gce.stop()
    k8s.stop()


def environment(aws: Any, providers: dict[str, str], spec: FunctionSpec) -> dict[str, str]:
    return {**aws.env, **providers, "PATH": "/usr/bin:/bin", "AWS_ENDPOINT_URL": aws.endpoint,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
            "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "InferCraneCheck",
            "AWS_LAMBDA_FUNCTION_NAME": spec.logical_id}


def prepared_event(aws: Any, path: Path) -> dict[str, Any]:
    """The event as committed, with the ids only this run knows: a real API key for the
    authorizer, a real prefetch request for an adapter message."""
    event = json.loads(path.read_text())
    now = datetime.now(UTC)
    if event.get("type") == "TOKEN":
        key = aws.container.tenancy.ensure_tenant("pkgcheck", now).raw_key
        event["authorizationToken"] = f"Bearer {key}"
    for record in event.get("Records", []):
        try:
            body = json.loads(record["body"])
        except ValueError:
            continue
        if isinstance(body, dict) and body.get("schema") == "infercrane.prefetch/v1":
            location, source = TARGETS[body["adapter"]]
            request, _ = aws.container.prefetch.request(body["tenant"], MODEL, body["adapter"],
                                                         location, source)
            body |= {"request_id": request.id, "model": MODEL, "location": location,
                     "source": source}
            record["body"] = json.dumps(body)
    return event


def check(aws: Any, providers: dict[str, str], spec: FunctionSpec,
          artifact: artifacts.Artifact) -> list[str]:
    """Problems of one function's artifact, each naming the function; [] when it is sound."""
    events = event_files(spec)
    if not events:
        return [f"{spec.logical_id}: no events/{spec.short_name}_*.json to invoke it with"]
    if not artifact.exists():
        return [f"{spec.logical_id}: artifact not built ({artifact.paths})"]
    pool = FunctionPool(spec, artifact, f"arn:aws:lambda:us-east-1:123456789012:function:"
                        f"{spec.logical_id}", environment(aws, providers, spec), size=1,
                        sink=LogSink(keep_metrics=False))
    problems = []
    try:
        for path in events:
            try:
                doc = pool.call(prepared_event(aws, path))
            except FunctionError as exc:
                problems.append(f"{spec.logical_id} ({path.name}): {exc.error_type}: {exc.message}"
                                + (f" [missing: {', '.join(exc.missing)}]" if exc.missing else ""))
                continue
            if doc.get("missing"):
                problems.append(f"{spec.logical_id} ({path.name}): its artifact lacks "
                                f"{', '.join(doc['missing'])}")
            error = doc.get("error")
            # The authorizer answers a bad key by raising "Unauthorized": that is its contract.
            if error and error["errorMessage"] != "Unauthorized":
                problems.append(f"{spec.logical_id} ({path.name}): {error['errorType']}: "
                                f"{error['errorMessage']}")
            result = doc.get("result")
            if isinstance(result, dict) and "statusCode" in result and result["statusCode"] >= 500:
                problems.append(f"{spec.logical_id} ({path.name}): HTTP {result['statusCode']}")
    finally:
        pool.close()
    return problems


def test_the_check_covers_every_function_in_the_template(stack_template):
    assert sorted(stack_template.functions) == _declared_functions()
    assert len(stack_template.functions) >= 11


@pytest.mark.slow
@pytest.mark.parametrize("function", _declared_functions())
def test_function_artifact_imports_in_isolation_and_serves_its_event(built, aws, providers,
                                                                      function):
    spec = built.functions[function]
    assert check(aws, providers, spec, artifacts.artifact(built.path, spec)) == []


@pytest.mark.slow
@pytest.mark.parametrize(("function", "layer", "module"), [
    ("AdapterKubernetesFunction", "KubernetesLayer", "kubernetes"),
    ("AdapterGcpFunction", "GcpComputeLayer", "google"),
])
def test_the_check_fails_by_name_when_a_dependency_leaves_the_artifact(built, aws, providers,
                                                                       function, layer, module):
    # As if the function's `Layers:` entry were deleted from template.yaml.
    spec = built.functions[function]
    without = replace(spec, layers=tuple(x for x in spec.layers if x != layer))
    problems = check(aws, providers, without, artifacts.artifact(built.path, without))
    assert problems, "the check passed an artifact without its dependency"
    assert all(p.startswith(function) for p in problems)
    assert any(f"lacks {module}" in p for p in problems), problems


@pytest.mark.slow
def test_runtime_package_leaves_out_the_cli_and_local_stack(built):
    package = artifacts.build_dir(built.path) / "SharedLayer" / "python" / "infercrane"
    assert (package / "bootstrap" / "__init__.py").is_file()
    for left_out in ("cli", "local", "qualify", "domain/capacity_synth.py"):
        assert not (package / left_out).exists(), left_out


SIGNING_KEY_PLACEHOLDER = "<signing_key_id from the local stack's ready line>"


def test_events_env_json_points_sam_local_invoke_at_the_local_stack(aws, stack_template):
    # `infercrane local serve --aws-port 4566` creates exactly these names; SAM passes a
    # variable into the container only if template.yaml declares it for the function.
    local = "http://127.0.0.1:4566"
    expected = {k: v.replace(aws.endpoint, local) for k, v in sorted(aws.env.items())}
    # KMS gives every new key a random id: env.json names the placeholder to replace with the
    # id the local stack prints (its ready line's `signing_key_id`).
    expected["INFERCRANE_SIGNING_KEY_ID"] = SIGNING_KEY_PLACEHOLDER
    committed = json.loads((EVENTS / "env.json").read_text())["Parameters"]
    assert committed == expected, ("events/env.json drifted from template.yaml; expected:\n"
                                   + json.dumps({"Parameters": expected}, indent=2))
    declared = set(stack_template.globals_env)
    for spec in stack_template.functions.values():
        declared |= set(spec.environment)
    assert set(committed) <= declared, set(committed) - declared


@pytest.mark.slow
def test_api_artifact_imports_every_module_its_routes_may_import(built):
    # The api's routes import their domain when called (a cold start pays only for the route it
    # serves), and its events reach few routes: every domain and http module is imported here in
    # the api's own isolated interpreter, so a dependency left out of its artifact still fails.
    spec = built.functions["ApiFunction"]
    paths = artifacts.artifact(built.path, spec).paths
    layer = next(p for p in paths if (p / "infercrane").is_dir())
    modules = sorted(".".join(f.relative_to(layer).with_suffix("").parts)
                     for area in ("domain", "http") for f in (layer / "infercrane" / area).rglob("*.py")
                     if f.name != "__init__.py")
    assert "infercrane.domain.capacity.service" in modules
    code = ("import importlib, sys\nsys.path[:0] = sys.argv[1:]\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code, *map(str, paths)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def _bytecode_flags(source: Path) -> int | None:
    """The flags word of `source`'s bytecode for this interpreter (PEP 552: 0 timestamp, 1
    unchecked hash, 3 checked hash), or None when there is none."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    return int.from_bytes(cached.read_bytes()[4:8], "little") if cached.is_file() else None


@pytest.mark.slow
def test_every_artifact_ships_bytecode_for_every_source(built):
    # Lambda's folders are read-only: a module without bytecode for the runtime is compiled from
    # source at every cold start. Ours is compiled by the build (unchecked hashes, flags 1; an
    # interpreter caching what it compiled writes timestamped bytecode, flags 0), the
    # dependencies by pip as it installs them.
    folders = sorted({p for spec in built.functions.values()
                      for p in artifacts.artifact(built.path, spec).paths})
    missing, ours_uncompiled = [], []
    for folder in folders:
        for source in folder.rglob("*.py"):
            flags = _bytecode_flags(source)
            if flags is None:
                missing.append(str(source))
            elif (folder.name != "python" or "infercrane" in source.relative_to(folder).parts[:1]) \
                    and flags != 1:
                ours_uncompiled.append(str(source))
    assert missing == []
    assert ours_uncompiled == []


RUNTIME_PYTHONS = sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))


@pytest.mark.skipif(not RUNTIME_PYTHONS, reason="no Python 3.12 (the Lambda runtime) under pyenv")
def test_the_layer_bytecode_is_the_runtime_pythons_and_used_whatever_the_source_says(tmp_path):
    # What `sam build` runs for SharedLayer: pip's interpreter may be another Python, whose
    # bytecode Lambda's 3.12 would ignore; the runtime's Python compiles it instead.
    runtime = str(RUNTIME_PYTHONS[-1])
    (tmp_path / "mod.py").write_text("X = 1\n")
    artifacts.compile_bytecode(runtime, [tmp_path])
    assert [p.name for p in tmp_path.rglob("*.pyc")] == ["mod.cpython-312.pyc"]
    (tmp_path / "mod.py").write_text("X = 2\n")  # a new mtime and size: a timestamp check fails
    done = subprocess.run([runtime, "-I", "-S", "-B", "-c",
                           "import sys; sys.path[:0] = sys.argv[1:]; import mod; print(mod.X)",
                           str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"


def test_source_that_does_not_compile_fails_the_build_by_name(tmp_path):
    (tmp_path / "broken.py").write_text("def (:\n")
    with pytest.raises(artifacts.BuildError, match="broken.py"):
        artifacts.compile_bytecode(sys.executable, [tmp_path])


def test_the_layer_is_not_built_without_the_runtime_python(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert artifacts.main([str(tmp_path / "out"), "--python-version", "3.12"]) == 1
    assert "python3.12 is not on PATH" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


LAMBDA_UNZIPPED_LIMIT = 262_144_000  # bytes: a function and all its layers, unzipped (250 MiB)


@pytest.mark.slow
def test_every_function_with_its_layers_and_their_bytecode_fits_lambdas_size_limit(built):
    for lid, spec in built.functions.items():
        size = sum(f.stat().st_size for folder in artifacts.artifact(built.path, spec).paths
                   for f in folder.rglob("*") if f.is_file())
        assert size <= LAMBDA_UNZIPPED_LIMIT, f"{lid}: {size:,} bytes unzipped"


# -- the distributions of an artifact, as Lambda assembles it ------------------------------------
def _shipped(folder: Path) -> dict[str, list[metadata.Distribution]]:
    found: dict[str, list[metadata.Distribution]] = {}
    for dist in metadata.distributions(path=[str(folder)]):
        found.setdefault(canonicalize_name(dist.metadata["Name"]), []).append(dist)
    return found


def dependency_problems(paths: tuple[Path, ...], names: tuple[str, ...], roots: list[str],
                        environment: dict[str, str] | None = None) -> list[str]:
    """What `pip check` would say of one artifact: `paths` are its folders as on sys.path (the
    function's code, then its layers, Globals' first) and `names` what to call them.

    Lambda extracts the layers into /opt in order, a later layer overwriting an earlier one's
    files, so two versions of one distribution in two layers leave a mix of both: refused. The
    distribution a module comes from is the function folder's, else the last layer's to ship it.
    Every requirement of every distribution that counts, and `roots` (what the layers declare in
    pyproject.toml), must be met, markers evaluated for the interpreter the artifact is built for
    (`environment`: this one by default), extras followed as pip follows them."""
    env = dict(environment or default_environment())
    problems = []
    effective: dict[str, metadata.Distribution] = {}
    versions: dict[str, dict[str, str]] = {}  # distribution -> {version: first layer shipping it}
    for path, name in zip(paths, names, strict=True):
        for dist_name, dists in _shipped(path).items():
            for dist in dists:
                versions.setdefault(dist_name, {}).setdefault(dist.version, name)
    # A later layer overwrites an earlier one; the function's own folder comes first on sys.path.
    for path in (paths[0], *reversed(paths[1:])):
        for dist_name, dists in _shipped(path).items():
            effective.setdefault(dist_name, dists[-1])
    for dist_name, shipped in sorted(versions.items()):
        if len(shipped) > 1:
            problems.append(f"{dist_name}: " + ", ".join(f"{layer} ships {version}" for version, layer
                                                        in shipped.items()))
    # (requirement, who requires it); each distribution's extras are followed once requested.
    todo = [(Requirement(r), "pyproject.toml") for r in roots]
    todo += [(Requirement(r), f"{n} {d.version}") for n, d in sorted(effective.items())
             for r in d.requires or () if _applies(Requirement(r), env, "")]
    followed: set[tuple[str, str]] = set()
    while todo:
        req, by = todo.pop()
        name = canonicalize_name(req.name)
        dist = effective.get(name)
        if dist is None:
            problems.append(f"{by} requires {req}: not installed")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{by} requires {req}: {dist.version} is installed")
        for extra in sorted(req.extras):
            if (name, extra) not in followed:
                followed.add((name, extra))
                todo += [(Requirement(r), f"{name}[{extra}] {dist.version}") for r in dist.requires or ()
                         if Requirement(r).marker is not None and _applies(Requirement(r), env, extra)
                         and not _applies(Requirement(r), env, "")]
    return sorted(set(problems))


def _applies(req: Requirement, env: dict[str, str], extra: str) -> bool:
    return req.marker is None or req.marker.evaluate({**env, "extra": extra})


@pytest.mark.slow
def test_every_artifact_meets_its_distributions_requirements_with_one_version_of_each(built):
    # `pip check` over what Lambda mounts: a layer built alone can bring a version another layer's
    # distributions refuse (KubernetesLayer's python-dateutil 4 over botocore's <3), which no
    # import in the check above need reach.
    root = built.path.parent
    problems = {}
    for lid, spec in built.functions.items():
        roots = [r for layer in spec.layers for r in artifacts.layer_requirements(root, built.layers[layer])]
        found = dependency_problems(artifacts.artifact(built.path, spec).paths, (lid, *spec.layers), roots)
        if found:
            problems[lid] = found
    assert problems == {}


def test_each_layer_requirements_file_is_its_part_of_the_lock(stack_template):
    # What `sam build` installs (--no-deps) is what the generator exports from uv.lock now.
    root = stack_template.path.parent
    for lid, uri in stack_template.layers.items():
        assert (root / uri / "requirements.txt").read_text() == artifacts.requirements_text(root, uri), (
            f"{lid}: {uri}/requirements.txt drifted from uv.lock (run `make install`)")


def test_a_lock_stale_against_pyproject_stops_the_build_naming_the_command(tmp_path):
    for name in ("pyproject.toml", "uv.lock"):
        (tmp_path / name).write_text((REPO / name).read_text())
    (tmp_path / "shared").mkdir()
    assert lock.export(tmp_path)  # as committed: fresh
    pyproject = tmp_path / "pyproject.toml"
    added = pyproject.read_text().replace("dependencies = [\n", 'dependencies = [\n  "six",\n', 1)
    pyproject.write_text(added)
    with pytest.raises(artifacts.BuildError, match="run `make lock`"):
        artifacts.requirements_text(tmp_path, "shared")


def _dist(folder: Path, name: str, version: str, *requires: str) -> None:
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))


def test_the_dependency_check_refuses_two_versions_in_two_layers_and_an_unmet_requirement(tmp_path):
    code, shared, provider = (tmp_path / n for n in ("code", "shared", "provider"))
    code.mkdir()
    _dist(shared, "botocore", "1.40.0", "python-dateutil<3.0.0,>=2.1")
    _dist(shared, "python-dateutil", "2.9.0")
    _dist(provider, "python-dateutil", "4.0.0")
    problems = dependency_problems((code, shared, provider), ("Fn", "Shared", "Provider"), [])
    # The later layer's files win: botocore then runs on dateutil 4.
    assert problems == ["botocore 1.40.0 requires python-dateutil<3.0.0,>=2.1: 4.0.0 is installed",
                        "python-dateutil: Shared ships 2.9.0, Provider ships 4.0.0"]
    # Layers in the other order: dateutil 2.9 wins, the two versions are still refused.
    assert dependency_problems((code, provider, shared), ("Fn", "Provider", "Shared"), []) == [
        "python-dateutil: Provider ships 4.0.0, Shared ships 2.9.0"]


def test_the_dependency_check_follows_extras_and_markers_for_the_runtime(tmp_path):
    code, layer = tmp_path / "code", tmp_path / "layer"
    code.mkdir()
    _dist(layer, "securesystemslib", "1.3.0", 'boto3; extra == "awskms"',
          'pywin32; sys_platform == "win32"', 'tomli; python_version < "3.11"')
    linux = {**default_environment(), "sys_platform": "linux", "python_version": "3.12"}
    assert dependency_problems((code, layer), ("Fn", "L"), ["securesystemslib"], linux) == []
    assert dependency_problems((code, layer), ("Fn", "L"), ["securesystemslib[awskms]"], linux) == [
        "securesystemslib[awskms] 1.3.0 requires boto3; extra == \"awskms\": not installed"]
    assert dependency_problems((code, layer), ("Fn", "L"), ["securesystemslib>=1.4"], linux) == [
        "pyproject.toml requires securesystemslib>=1.4: 1.3.0 is installed"]
    windows = {**linux, "sys_platform": "win32"}
    assert dependency_problems((code, layer), ("Fn", "L"), [], windows) == [
        "securesystemslib 1.3.0 requires pywin32; sys_platform == \"win32\": not installed"]
