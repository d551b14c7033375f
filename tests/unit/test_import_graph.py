"""The package's structure (docs/architecture.md, Layout) is checked, not only described: no module of
`infercrane` imports a higher layer, no handler imports the workstation-only packages, and no two
modules import each other, however indirectly.

Imports are read with `ast` from the source of shared/infercrane and functions/*: every `import`
and `from … import`, at module level or deferred inside a function (a deferred import is still an
arrow). Imports under `if TYPE_CHECKING:` count for the layers (a domain module naming an adapter
in an annotation depends on it), not for cycles (they never run: a port naming the domain's models
while the domain's service names the port is how ports work). Imports built from strings
(`importlib.import_module(f"infercrane.cli.{name}")`) stay within their own package and are not
read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "shared" / "infercrane"

# Lowest first; a module may import its own layer and the layers below it. Each name is an area:
# the first part under `infercrane` ("infercrane" itself is the package's __init__).
LAYERS: list[set[str]] = [
    {"infercrane", "errors", "clock", "logs"},  # leaf utilities (schemas/ holds no Python)
    {"domain", "ports"},  # the domain and its own interfaces: services call ports, ports speak models
    {"adapters", "settings", "edge"},  # the outside systems; Settings; the gateway's signing helper
    {"bootstrap"},  # wiring: builds adapters from Settings
    {"http"},  # the REST resolver and its routes, over the container
    {"local"},  # the embedded local stack (workstation only, like the layers above)
    {"qualify"},  # qualification, run against the local stack or real providers
    {"cli"},  # the `infercrane` command, top of the package
]
# The Lambda handlers (functions/<name>/app.py) are above every runtime layer, and may not import
# what SharedLayer does not ship (artifacts.RUNTIME_EXCLUDE).
HANDLER_FORBIDDEN = {"local", "qualify", "cli"}

# Arrows the test knows about and accepts: (importer, imported) -> why. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Arrow:
    source: str  # importing module
    target: str  # imported module
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The package module `name` refers to (a module, or the package holding the name)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def _arrows(source: str, path: Path, mods: dict[str, Path], is_package: bool) -> Iterator[Arrow]:
    package = source if is_package else source.rpartition(".")[0]
    for node, type_only in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import name`: the submodule if `name` is one, else pkg itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                       for a in node.names]
        for name in targets:
            if name == "infercrane" or name.startswith("infercrane."):
                target = _resolve(name, mods)
                if target is not None and target != source:
                    yield Arrow(source, target, node.lineno, type_only)


def _graph() -> list[Arrow]:
    mods = _modules()
    arrows = []
    for name, path in mods.items():
        arrows += _arrows(name, path, mods, path.name == "__init__.py")
    for path in sorted((REPO / "functions").glob("*/*.py")):
        name = "functions." + ".".join(path.relative_to(REPO / "functions").with_suffix("").parts)
        arrows += _arrows(name, path, mods, False)
    return arrows


def area(module: str) -> str:
    parts = module.split(".")
    return parts[0] if parts[0] != "infercrane" else (parts[1] if len(parts) > 1 else parts[0])


def rank(module: str) -> int:
    if module.startswith("functions."):
        return len(LAYERS)
    for i, layer in enumerate(LAYERS):
        if area(module) in layer:
            return i
    raise AssertionError(f"{module}: its area {area(module)!r} is in no layer of "
                         "tests/unit/test_import_graph.py (add it, and to docs/architecture.md)")


def upward(arrows: list[Arrow]) -> list[str]:
    found = []
    for a in arrows:
        handler_reach = a.source.startswith("functions.") and area(a.target) in HANDLER_FORBIDDEN
        if (rank(a.target) > rank(a.source) or handler_reach) and (a.source, a.target) not in ALLOWED:
            found.append(f"{a.source}:{a.line} imports {a.target} "
                         f"({area(a.source)} may not import {area(a.target)})")
    return found


def cycles(arrows: list[Arrow]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), over the arrows that run."""
    graph: dict[str, set[str]] = {}
    for a in arrows:
        if not a.type_only and (a.source, a.target) not in ALLOWED:
            graph.setdefault(a.source, set()).add(a.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def arrows() -> list[Arrow]:
    return _graph()


def test_no_module_imports_a_higher_layer(arrows):
    assert upward(arrows) == []


def test_no_modules_import_each_other(arrows):
    assert cycles(arrows) == []


def test_every_allowed_arrow_still_exists(arrows):
    """An allow-list entry whose import is gone must go too, or it would excuse the next one."""
    present = {(a.source, a.target) for a in arrows}
    assert [pair for pair in ALLOWED if pair not in present] == []


def test_the_reader_sees_deferred_and_type_only_imports(arrows):
    # The check is only as good as its reader: a deferred import inside a function is an arrow,
    # an import under TYPE_CHECKING is one marked type-only.
    by_pair = {(a.source, a.target): a for a in arrows}
    deferred = by_pair[("infercrane.cli.qualify", "infercrane.qualify.providers")]
    assert not deferred.type_only
    assert by_pair[("infercrane.domain.capacity.service", "infercrane.ports.capacity")].type_only
    assert any(a.source == "functions.api.app" for a in arrows)


def test_an_upward_arrow_or_a_cycle_fails():
    down = Arrow("infercrane.cli.trace", "infercrane.domain.trace", 1, False)
    up = Arrow("infercrane.domain.trace", "infercrane.adapters.trace_files", 1, False)
    handler = Arrow("functions.api.app", "infercrane.local.stack", 1, False)
    assert upward([down]) == []
    assert len(upward([up, handler])) == 2
    back = Arrow("infercrane.cli.output", "infercrane.cli.trace", 1, False)
    assert cycles([down, back]) == []
    assert cycles([Arrow(back.target, back.source, 1, False), back]) == [
        ["infercrane.cli.output", "infercrane.cli.trace"]]
    assert cycles([Arrow(back.target, back.source, 1, True), back]) == []
