"""The SQL side of the segment row schema (issue 27), rendered from its one definition.

`domain/observation_rows.py` defines a segment row (`COLUMNS`) and its Hive partitions
(`PARTITIONS`). From them this module renders the three things that must agree with it:

- template.yaml's Glue table over the segment prefix (columns, partition keys, partition
  projection), between the `BEGIN GENERATED` / `END GENERATED` lines;
- the table of columns in docs/capture.md ("Querying your shapes with SQL"), between its markers;
- the `columns` / `hive_types` mappings DuckDB reads the same segments with (the SQL test).

`python -m infercrane.local.sql_schema --write` regenerates both files in place (`--check` says
whether they are current); tests/unit/test_sql_schema.py fails while they are not. It lives in
`local/` (workstation only, like `lock.py`): no function needs it at run time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from infercrane.adapters.segments.layout import PREFIX
from infercrane.domain.observation_rows import COLUMNS, PARTITIONS, SCHEMA_VERSION, Column
from infercrane.domain.validation import EARLIEST_TIME, MAX_FUTURE

DATABASE_LOGICAL_ID = "ObservationsGlueDatabase"
TABLE_LOGICAL_ID = "ObservationsGlueTable"
TABLE_NAME = "observations"
JSON_SERDE = "org.openx.data.jsonserde.JsonSerDe"
# What Athena reads and would write text tables with: gzip is recognised by the `.gz` suffix.
INPUT_FORMAT = "org.apache.hadoop.mapred.TextInputFormat"
OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
GLUE_COMMENT_MAX = 255  # Glue's limit on a column's Comment

# Hive/Glue type (as COLUMNS spells it) -> DuckDB type. A type missing here fails the render.
_DUCKDB_TYPES = {
    "string": "VARCHAR", "bigint": "BIGINT", "int": "INTEGER", "double": "DOUBLE",
    "boolean": "BOOLEAN", "array<string>": "VARCHAR[]",
}

# Partition projection, per partition (Athena computes the partitions from these; no crawler, no
# partition ever registered). tenant and deployment are `injected`: their values are unbounded
# (an `enum` would need every tenant in the table and a stack update per tenant), and an injected
# column must be named by an equality in every query, so no query can read all tenants by leaving
# the tenant out: each reads one deployment's prefix, which bounds what it is billed for and is the
# prefix a querying role's s3:GetObject is scoped to. date runs from the earliest arrival the
# service accepts to the latest (one day ahead of now), as arrivals are validated.
_PROJECTION: dict[str, dict[str, str]] = {
    "tenant": {"type": "injected"},
    "deployment": {"type": "injected"},
    "date": {
        "type": "date", "format": "yyyy-MM-dd",
        "range": f"{EARLIEST_TIME:%Y-%m-%d},NOW+{MAX_FUTURE.days}DAYS",
        "interval": "1", "interval.unit": "DAYS",
    },
    "hour": {"type": "integer", "range": "0,23", "digits": "2"},
}

TEMPLATE_BEGIN = f"  # BEGIN GENERATED {TABLE_LOGICAL_ID}"
TEMPLATE_END = f"  # END GENERATED {TABLE_LOGICAL_ID}"
DOCS_BEGIN = "<!-- BEGIN GENERATED observation columns"
DOCS_END = "<!-- END GENERATED observation columns -->"
COMMAND = "python -m infercrane.local.sql_schema --write"
SOURCE = "shared/infercrane/domain/observation_rows.py"


def duckdb_type(sql_type: str) -> str:
    try:
        return _DUCKDB_TYPES[sql_type]
    except KeyError:
        raise ValueError(f"no DuckDB type for the Glue type {sql_type!r}: add it to "
                         f"sql_schema._DUCKDB_TYPES") from None


def duckdb_columns() -> dict[str, str]:
    """`read_json(..., columns=...)`: every row column with its DuckDB type."""
    return {c.name: duckdb_type(c.sql_type) for c in COLUMNS}


def duckdb_hive_types() -> dict[str, str]:
    """`read_json(..., hive_types=...)`: the partitions typed as Glue declares them (DuckDB would
    otherwise read `date=2026-12-02` as a DATE and `hour=07` as the number 7)."""
    return {p.name: duckdb_type(p.sql_type) for p in PARTITIONS}


def _comment(column: Column) -> str:
    text = column.doc.replace("`", "")
    if len(text) > GLUE_COMMENT_MAX:
        raise ValueError(f"{column.name}: its doc is longer than a Glue comment ({len(text)} > "
                         f"{GLUE_COMMENT_MAX})")
    return text


def glue_columns(columns: Sequence[Column] = COLUMNS) -> list[dict[str, str]]:
    """The Glue `Columns` (or `PartitionKeys`) list for `columns`."""
    for c in columns:
        duckdb_type(c.sql_type)  # a type the SQL test cannot read is refused here too
    return [{"Name": c.name, "Type": c.sql_type, "Comment": _comment(c)} for c in columns]


def projection_parameters(partitions: Sequence[Column] = PARTITIONS) -> dict[str, str]:
    """The table's partition projection parameters (without storage.location.template)."""
    names = [p.name for p in partitions]
    if sorted(names) != sorted(_PROJECTION):
        raise ValueError(f"partitions {names} but a projection for {sorted(_PROJECTION)}: give "
                         f"every partition its projection in sql_schema._PROJECTION")
    params = {"projection.enabled": "true"}
    for name in names:
        params.update({f"projection.{name}.{key}": value
                       for key, value in _PROJECTION[name].items()})
    return params


def location_template(partitions: Sequence[Column] = PARTITIONS) -> str:
    """The `!Sub` text of storage.location.template: `${!x}` is CloudFormation's escape for the
    literal `${x}` that Athena fills in."""
    path = "/".join(f"{p.name}=${{!{p.name}}}" for p in partitions)
    return f"s3://${{DocumentsBucket}}/{PREFIX}{path}/"


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def _flow(entry: dict[str, str]) -> str:
    return (f"- {{ Name: {entry['Name']}, Type: {_q(entry['Type'])}, "
            f"Comment: {_q(entry['Comment'])} }}")


def template_block() -> str:
    """template.yaml's generated Glue table, markers included."""
    lines = [
        f"{TEMPLATE_BEGIN} by `{COMMAND}` from",
        f"  # {SOURCE} (segment schema {SCHEMA_VERSION}): edit that module and regenerate.",
        "  # Segments are gzip JSON Lines (`.json.gz`), a row per observation, null columns omitted;",
        "  # docs/capture.md, \"Querying your shapes with SQL\", has the queries and the IAM they need.",
        f"  {TABLE_LOGICAL_ID}:",
        "    Type: AWS::Glue::Table",
        "    Properties:",
        "      CatalogId: !Ref AWS::AccountId",
        f"      DatabaseName: !Ref {DATABASE_LOGICAL_ID}",
        "      TableInput:",
        f"        Name: {TABLE_NAME}",
        "        Description: >-",
        "          Captured and imported observations (shapes, never bodies), one row each, read from",
        f"          the segments under the documents bucket's {PREFIX} prefix.",
        "        TableType: EXTERNAL_TABLE",
        "        Parameters:",
        '          EXTERNAL: "TRUE"',
        "          classification: json",
        "          compressionType: gzip",
        f'          infercrane.segment_schema_version: "{SCHEMA_VERSION}"',
        "          # Partitions are projected, never registered (no crawler). tenant and deployment",
        "          # are injected: every query must name both with `=`, so none reads all tenants",
        "          # (isolation by prefix, with IAM on it) and each is billed for one deployment's",
        "          # bytes at most; date spans the arrivals the service accepts.",
    ]
    lines += [f"          {key}: {_q(value)}" for key, value in projection_parameters().items()]
    lines += [
        f"          storage.location.template: !Sub {_q(location_template())}",
        "        PartitionKeys:",
        *(f"          {_flow(e)}" for e in glue_columns(PARTITIONS)),
        "        StorageDescriptor:",
        f'          Location: !Sub "s3://${{DocumentsBucket}}/{PREFIX}"',
        f"          InputFormat: {INPUT_FORMAT}",
        f"          OutputFormat: {OUTPUT_FORMAT}",
        "          SerdeInfo:",
        f"            SerializationLibrary: {JSON_SERDE}",
        "          Columns:",
        *(f"            {_flow(e)}" for e in glue_columns(COLUMNS)),
        TEMPLATE_END,
    ]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a bar would end the Markdown table's cell


def docs_block() -> str:
    """docs/capture.md's generated table of columns, markers included."""
    rows = [f"{DOCS_BEGIN}: `{COMMAND}` from {SOURCE} -->",
            "",
            "| column | type | in every row | meaning |",
            "|---|---|---|---|"]
    rows += [f"| `{p.name}` | `{p.sql_type}` | partition (object key) | {_cell(p.doc)} |"
             for p in PARTITIONS]
    rows += [f"| `{c.name}` | `{c.sql_type}` | {'yes' if c.required else 'no (omitted when null)'} "
             f"| {_cell(c.doc)} |" for c in COLUMNS]
    rows += ["", DOCS_END]
    return "\n".join(rows) + "\n"


def regenerate(text: str, begin: str, end: str, block: str, name: str) -> str:
    """`text` with the lines from the one starting with `begin` to the one starting with `end`
    replaced by `block` (which holds both markers)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(begin)]
    ends = [i for i, line in enumerate(lines) if line.startswith(end)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"{name}: expected one {begin.strip()!r} line before one {end.strip()!r} "
                         f"line, found {len(starts)} and {len(ends)}")
    return "".join(lines[: starts[0]]) + block + "".join(lines[ends[0] + 1:])


def targets(root: Path) -> list[tuple[Path, str, str, str]]:
    """(file, begin marker, end marker, rendered block) of each generated part under `root`."""
    return [(root / "template.yaml", TEMPLATE_BEGIN, TEMPLATE_END, template_block()),
            (root / "docs" / "capture.md", DOCS_BEGIN, DOCS_END, docs_block())]


def _renders(root: Path) -> list[tuple[Path, str, str]]:
    """(file, its text, its text regenerated) for each target; raises before any is written."""
    out = []
    for path, begin, end, block in targets(root):
        text = path.read_text(encoding="utf-8")
        out.append((path, text, regenerate(text, begin, end, block, path.name)))
    return out


def stale(root: Path) -> list[Path]:
    """The files whose generated part is not what the schema renders."""
    return [path for path, text, new in _renders(root) if new != text]


def write(root: Path) -> list[Path]:
    """Regenerates the stale files, each replaced whole (a temporary file renamed over it, so an
    interrupted run leaves every file as it was or as it should be); returns them."""
    changed = []
    for path, text, new in _renders(root):
        if new != text:
            tmp = path.with_name(path.name + ".sql_schema.tmp")
            tmp.write_text(new, encoding="utf-8")
            tmp.replace(path)
            changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infercrane.local.sql_schema",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true",
                        help="regenerate template.yaml's Glue table and docs/capture.md's table")
    parser.add_argument("--check", action="store_true", help="exit 1 if either is stale")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[3],
                        help="the repository (default: the one this module is in)")
    args = parser.parse_args(argv)
    if args.write:
        for path in write(args.root):
            print(f"regenerated {path}")
        return 0
    if args.check:
        behind = stale(args.root)
        for path in behind:
            print(f"{path} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if behind else 0
    sys.stdout.write(template_block() + "\n" + docs_block())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
