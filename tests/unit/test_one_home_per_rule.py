"""One home per rule (issue 29, item 3): each input rule is written once and imported elsewhere.

The package's and the handlers' source is read with `ast`; a string constant (an f-string's literal
parts included) that spells a rule again outside its home fails, naming the file and the line. A
pattern is compared without its anchors, so `^X$`, `X` and `^X` are one rule; the digest is also
found inside a longer pattern (a provenance, a binding tag), where it must be built from
`validation.DIGEST` instead.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from infercrane.domain import validation
from infercrane.http import body

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "infercrane"
VALIDATION = PACKAGE / "domain" / "validation.py"
BODY = PACKAGE / "http" / "body.py"

# (what the rule is, its text, its home, whether a copy inside a longer string counts)
RULES: list[tuple[str, str, Path, bool]] = [
    ("deployment/revision name", validation.NAME_PATTERN, VALIDATION, False),
    ("short name (runtime, region, zone, GPU)", validation.SHORT_NAME_PATTERN, VALIDATION, False),
    ("client id", validation.ID_PATTERN, VALIDATION, False),
    ("SHA-256 hex", validation.SHA256_HEX_PATTERN, VALIDATION, False),
    ("digest", validation.DIGEST, VALIDATION, True),
    ("tenant name", validation.TENANT_RE.pattern, VALIDATION, False),
    *[("protobuf media type", media_type, BODY, False)
      for media_type in sorted(body.PROTOBUF_MEDIA_TYPES)],
]


def _bare(pattern: str) -> str:
    """A pattern without its outer anchors: `^X$`, `^X` and `X` are the same rule."""
    return pattern.removeprefix("^").removesuffix("$")


def _sources() -> Iterator[Path]:
    yield from sorted(PACKAGE.rglob("*.py"))
    yield from sorted((ROOT / "functions").glob("*/*.py"))


def second_definitions(path: Path, source: str) -> list[str]:
    """`file:line: rule` for every string constant in `source` that spells a rule homed elsewhere."""
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = node.value
        for name, rule, home, embedded in RULES:
            if path == home:
                continue
            same = _bare(text) == _bare(rule) or text.strip().lower() == rule
            if same or (embedded and rule in text):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{node.lineno}: the {name} rule {rule!r} again "
                             f"(import it from {home.relative_to(ROOT)})")
    return found


def test_every_rule_has_one_definition() -> None:
    found = [hit for path in _sources() for hit in second_definitions(path, path.read_text())]
    assert not found, "\n".join(found)


def test_each_rule_is_written_in_its_home() -> None:
    """The scan above skips each home: the rule must really be spelled there, once."""
    for name, rule, home, _ in RULES:
        hits = [node for node in ast.walk(ast.parse(home.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
                and _bare(node.value) == _bare(rule)]
        assert len(hits) == 1, f"{name}: {len(hits)} definitions in {home.name}"


@pytest.mark.parametrize("copy", [
    'X = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"',
    'X = Field(pattern=r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")',
    'X = re.compile(r"^[0-9a-f]{64}$")',
    'X = rf"^(jsonl):sha256:[0-9a-f]{{64}}$"',
    'X = re.compile(r"tag=(sha256:[0-9a-f]{64})")',
    'Response(200, "application/x-protobuf", b"")',
])
def test_a_copy_anywhere_else_is_found_with_its_file_and_line(copy: str) -> None:
    path = PACKAGE / "domain" / "somewhere.py"
    found = second_definitions(path, f'"""A module."""\n\n{copy}\n')
    assert found and found[0].startswith("shared/infercrane/domain/somewhere.py:3: ")


def test_uses_of_a_rule_are_not_copies() -> None:
    source = ("from infercrane.domain.validation import DIGEST, NAME_PATTERN\n"
              'P = rf"^(jsonl):{DIGEST}$"\nF = NAME_PATTERN\nQ = r"^[0-9a-f]{32}$"\n')
    assert second_definitions(PACKAGE / "domain" / "somewhere.py", source) == []


def test_the_published_trace_schema_spells_the_digest_rule() -> None:
    """The JSON schema cannot import the rule; it must at least say the same."""
    schema = json.loads((PACKAGE / "schemas" / "trace.v1.json").read_text())

    def patterns(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            for value in node.values():
                yield from patterns(value)
        elif isinstance(node, list):
            for value in node:
                yield from patterns(value)

    digests = [p for p in patterns(schema) if "sha256:" in p]
    assert digests and all(p == validation.DIGEST_PATTERN for p in digests)


# -- the batch contract (domain/batch.py) ----------------------------------------------------------

BATCH = PACKAGE / "domain" / "batch.py"
# Names only the batch contract may define: its limit, its item error, its envelope check.
BATCH_NAMES = frozenset({"MAX_BATCH", "ItemError", "closed_envelope", "ENVELOPE", "item_error"})


def batch_rule_copies(path: Path, source: str) -> list[str]:
    """`file:line: what` for each definition of a batch-contract name outside domain/batch.py, and
    each envelope of allowed keys (a set or frozenset literal of "items") built elsewhere."""
    if path == BATCH:
        return []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id.lstrip("_") for t in targets if isinstance(t, ast.Name)]
        names = [n for n in names if n in BATCH_NAMES]
        if isinstance(node, ast.Set) and any(isinstance(e, ast.Constant) and e.value == "items"
                                             for e in node.elts):
            names.append('an envelope {"items"}')
        found += [f"{where}:{node.lineno}: {n} again (import it from domain/batch.py)"
                  for n in names]
    return found


def test_the_batch_contract_has_one_definition():
    found = [hit for path in _sources() for hit in batch_rule_copies(path, path.read_text())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("copy", [
    "MAX_BATCH = 500",
    "_MAX_BATCH: int = 1000",
    "class ItemError:\n    pass",
    "def closed_envelope(document, allowed, sentence):\n    pass",
    '_ENVELOPE = frozenset({"items"})',
    'if set(doc) - {"items"}:\n    pass',
])
def test_a_second_batch_contract_is_found_with_its_file_and_line(copy: str) -> None:
    path = PACKAGE / "domain" / "capacity" / "somewhere.py"
    found = batch_rule_copies(path, f'"""A module."""\n\n{copy}\n')
    assert found and found[0].startswith("shared/infercrane/domain/capacity/somewhere.py:3: ")


def test_importing_the_batch_contract_is_not_a_copy():
    source = ("from infercrane.domain.batch import MAX_BATCH, ItemError, batch_items\n"
              "LIMIT = MAX_BATCH\nerrors: list[ItemError] = []\n"
              'def batch_of(body):\n    return batch_items(body, "attempts")\n')
    assert batch_rule_copies(PACKAGE / "domain" / "somewhere.py", source) == []


# -- one name for "as a JSON document" ---------------------------------------------------------

# Our classes say `to_document` / `from_document`; these other spellings of the same idea must not
# come back (a library's `to_json`, called on its own objects, is not defined here).
OTHER_DOCUMENT_NAMES = frozenset({
    "to_json", "from_json", "to_doc", "from_doc", "as_json", "as_dict", "to_dict", "from_dict",
    "as_doc", "as_document", "to_jsonable", "json_document"})


def document_method_aliases(path: Path, source: str) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{item.lineno}: {node.name}.{item.name} (call it to_document/from_document)"
            for node in ast.walk(ast.parse(source, filename=str(path)))
            if isinstance(node, ast.ClassDef)
            for item in node.body
            if isinstance(item, ast.FunctionDef) and item.name in OTHER_DOCUMENT_NAMES]


def test_our_classes_have_one_name_for_a_json_document():
    found = [hit for path in _sources() for hit in document_method_aliases(path, path.read_text())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", sorted(OTHER_DOCUMENT_NAMES))
def test_another_name_for_a_json_document_is_found(name: str) -> None:
    source = f"class Result:\n    def {name}(self):\n        return {{}}\n"
    found = document_method_aliases(PACKAGE / "domain" / "somewhere.py", source)
    assert found == [f"shared/infercrane/domain/somewhere.py:2: Result.{name} "
                     "(call it to_document/from_document)"]


def test_a_library_to_json_called_on_its_own_object_is_not_ours():
    source = "def render(fig):\n    return fig.to_json()\n"
    assert document_method_aliases(PACKAGE / "adapters" / "somewhere.py", source) == []


# -- the batch limit's value (500) written out again ----------------------------------------------

# Module-level 500s that are not the batch limit, each with why (path relative to the package).
OTHER_500S = {
    # Its own page of copied keys; another helper owns the file (issue 29 review): its CHUNK is
    # left to them, to import MAX_BATCH or to say why a migration page is its own number.
    ("domain/migration.py", "CHUNK"),
    # Segments one DELETE call meets at most, sized by API Gateway's 29 s, not by a request's
    # items (another helper owns adapters/segments/ as well).
    ("adapters/segments/store.py", "DELETE_PAGE"),
    # A report group's sample count under which its durations are exact: a statistics bound.
    ("domain/capacity/report.py", "EXACT_IN_REPORT"),
}


def batch_limit_copies(path: Path, source: str) -> list[str]:
    """`file:line: what` for each module-level constant assigned the literal 500 and each step of
    500 through a sequence (`range(a, b, 500)`, `items[i:i + 500]`) outside domain/batch.py: the
    batch limit spelled again, so a change of `MAX_BATCH` would leave it behind."""
    if path == BATCH:
        return []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    home = str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else str(where)
    tree = ast.parse(source, filename=str(path))
    found = []

    def is_500(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 500

    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and is_500(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else ast.unparse(target)
                if (home, name) not in OTHER_500S:
                    found.append(f"{where}:{node.lineno}: {name} = 500, the batch limit again "
                                 "(import MAX_BATCH from domain/batch.py)")
    for node in ast.walk(tree):
        step = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "range" and len(node.args) == 3:
            step = node.args[2]
        elif isinstance(node, ast.Slice):
            step = node.step if node.step is not None else (
                node.upper.right if isinstance(node.upper, ast.BinOp)
                and isinstance(node.upper.op, ast.Add) else None)
        if is_500(step):
            found.append(f"{where}:{node.lineno}: a step of 500, the batch limit again "
                         "(import MAX_BATCH from domain/batch.py)")
    return found


def test_the_batch_limit_is_written_once():
    found = [hit for path in _sources() for hit in batch_limit_copies(path, path.read_text())]
    assert not found, "\n".join(found)


def test_every_other_500_is_still_there():
    """An allow-list entry whose constant went would hide the next copy under its name."""
    for home, name in OTHER_500S:
        tree = ast.parse((PACKAGE / home).read_text())
        assert any(isinstance(node, ast.Assign) and is_name(node, name) for node in tree.body), \
            f"{home}: {name} is gone; drop it from OTHER_500S"


def is_name(node: ast.Assign, name: str) -> bool:
    return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)


@pytest.mark.parametrize("copy", [
    "BATCH = 500",
    "_LIMIT: int = 500",
    "for i in range(0, n, 500):\n    pass",
    "chunk = items[i:i + 500]",
    "every = items[::500]",
])
def test_the_batch_limit_written_out_is_found_with_its_file_and_line(copy: str) -> None:
    path = PACKAGE / "cli" / "somewhere.py"
    found = batch_limit_copies(path, f'"""A module."""\n\n{copy}\n')
    assert found and found[0].startswith("shared/infercrane/cli/somewhere.py:3: ")


@pytest.mark.parametrize("source", [
    "from infercrane.domain.batch import MAX_BATCH\nfor i in range(0, n, MAX_BATCH):\n    pass\n",
    "def f():\n    timeout_ms = 500\n",  # not module-level: a local value, not a rule
    "STATUS = 5000\nLATE = 500.0\n",
    "head = items[:500]\n",  # a bound, not a step through the sequence
])
def test_other_uses_of_500_are_not_the_batch_limit(source: str) -> None:
    assert batch_limit_copies(PACKAGE / "cli" / "somewhere.py", source) == []


# -- one class per error code ------------------------------------------------------------------


def error_code_copies(sources: dict[Path, str]) -> list[str]:
    """`file:line: Class` for each DomainError subclass whose class-level `code` another subclass
    already spells: one code, one class (a raise may still pass `code=` for a finer code).
    Subclasses are found by name through their bases, across every module given."""
    classes: list[tuple[Path, ast.ClassDef]] = [
        (path, node) for path, source in sources.items()
        for node in ast.walk(ast.parse(source, filename=str(path)))
        if isinstance(node, ast.ClassDef)]

    def base_names(node: ast.ClassDef) -> set[str]:
        return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                if isinstance(b, ast.Name | ast.Attribute)}

    errors = {"DomainError"}
    while grown := {n.name for _, n in classes if base_names(n) & errors} - errors:
        errors |= grown
    first: dict[str, str] = {}
    found = []
    for path, node in classes:
        if node.name not in errors:
            continue
        for statement in node.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant) \
                    and any(isinstance(t, ast.Name) and t.id == "code" for t in statement.targets):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                here = f"{where}:{node.lineno}: {node.name}"
                code = statement.value.value
                if code in first:
                    found.append(f"{here} has code {code!r}, as {first[code]} does (keep one)")
                else:
                    first[code] = here
    return found


def test_each_error_code_belongs_to_one_class():
    assert not (found := error_code_copies({p: p.read_text() for p in _sources()})), \
        "\n".join(found)


def test_a_second_class_with_an_error_code_is_found_with_its_file_and_line():
    errors_py = PACKAGE / "errors.py"
    body = PACKAGE / "http" / "somewhere.py"
    found = error_code_copies({
        errors_py: 'class DomainError(Exception):\n    code = "error"\n\n'
                   'class BadRequest(DomainError):\n    code = "bad_request"\n',
        body: "from infercrane import errors\n\n"
              'class Malformed(errors.BadRequest):\n    code = "bad_request"\n\n'
              'class NotAnError:\n    code = "error"\n'})
    assert found == ["shared/infercrane/http/somewhere.py:3: Malformed has code 'bad_request', "
                     "as shared/infercrane/errors.py:4: BadRequest does (keep one)"]
