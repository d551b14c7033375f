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
