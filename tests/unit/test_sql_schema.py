"""template.yaml's Glue table and docs/capture.md's column table are the one row schema.

Each is compared with `COLUMNS` / `PARTITIONS` themselves (not with what the generator renders,
which is the code under test), and each file's generated part must be exactly what
`python -m infercrane.local.sql_schema --write` renders: changing the schema without
regenerating fails here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from infercrane.domain.observation_rows import COLUMNS, PARTITIONS, SCHEMA_VERSION, Column
from infercrane.domain.validation import EARLIEST_TIME
from infercrane.local import sql_schema

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table() -> dict[str, Any]:
    from cfnlint.decode import cfn_yaml

    from infercrane.local.template import _plain

    raw = _plain(cfn_yaml.load(str(REPO / "template.yaml")))
    tables = [r for r in raw["Resources"].values() if r["Type"] == "AWS::Glue::Table"]
    assert len(tables) == 1
    return tables[0]["Properties"]


def _typed(columns: tuple[Column, ...]) -> list[tuple[str, str]]:
    return [(c.name, c.sql_type) for c in columns]


def test_the_glue_table_s_columns_and_partition_keys_are_the_row_schema(table):
    table_input = table["TableInput"]
    columns = table_input["StorageDescriptor"]["Columns"]
    assert [(c["Name"], c["Type"]) for c in columns] == _typed(COLUMNS)
    assert [(k["Name"], k["Type"]) for k in table_input["PartitionKeys"]] == _typed(PARTITIONS)
    assert all(0 < len(c["Comment"]) <= 255 for c in columns)
    assert table_input["Parameters"]["infercrane.segment_schema_version"] == str(SCHEMA_VERSION)


def test_the_glue_table_reads_gzip_json_lines_under_the_segment_prefix(table):
    table_input = table["TableInput"]
    storage = table_input["StorageDescriptor"]
    assert table_input["TableType"] == "EXTERNAL_TABLE"
    assert storage["SerdeInfo"]["SerializationLibrary"] == "org.openx.data.jsonserde.JsonSerDe"
    assert storage["InputFormat"] == "org.apache.hadoop.mapred.TextInputFormat"
    assert storage["Location"] == {"Fn::Sub": "s3://${DocumentsBucket}/observations/"}
    assert table["DatabaseName"] == {"Ref": "ObservationsGlueDatabase"}


def test_partitions_are_projected_and_located_as_the_writer_lays_out_segment_keys(table):
    params = table["TableInput"]["Parameters"]
    assert params["projection.enabled"] == "true"
    assert params["projection.tenant.type"] == params["projection.deployment.type"] == "injected"
    assert params["projection.date.type"] == "date"
    assert params["projection.date.format"] == "yyyy-MM-dd"
    start, end = params["projection.date.range"].split(",")
    assert (start, end) == (f"{EARLIEST_TIME:%Y-%m-%d}", "NOW+1DAYS")  # arrivals accepted
    assert (params["projection.hour.type"], params["projection.hour.range"],
            params["projection.hour.digits"]) == ("integer", "0,23", "2")
    assert {k.split(".")[1] for k in params if k.startswith("projection.")} - {"enabled"} == {
        p.name for p in PARTITIONS}
    # Athena fills `${x}` (CloudFormation's `${!x}`) in; the result is the segment key layout.
    template = params["storage.location.template"]["Fn::Sub"]
    located = (template.replace("${DocumentsBucket}", "bucket").replace("${!", "{")
               .format(tenant="acme", deployment="coder", date="2026-12-02", hour="07"))
    assert located == "s3://bucket/observations/tenant=acme/deployment=coder/date=2026-12-02/hour=07/"


def test_the_docs_table_of_columns_is_the_row_schema():
    text = (REPO / "docs" / "capture.md").read_text(encoding="utf-8")
    block = text[text.index(sql_schema.DOCS_BEGIN):text.index(sql_schema.DOCS_END)]
    rows = re.findall(r"^\| `([a-z_]+)` \| `([^`]+)` \|", block, flags=re.MULTILINE)
    assert rows == _typed(PARTITIONS) + _typed(COLUMNS)


def test_template_and_docs_are_what_the_schema_renders():
    assert sql_schema.stale(REPO) == [], f"run `{sql_schema.COMMAND}` and commit the result"


def test_write_brings_a_stale_copy_back_and_check_tells(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("template.yaml", "docs/capture.md"):
        shutil.copy(REPO / name, tmp_path / name)
    copy = tmp_path / "template.yaml"
    copy.write_text(copy.read_text().replace("Name: input_tokens, Type: \"bigint\"",
                                             "Name: input_tokens, Type: \"int\""))
    assert sql_schema.main(["--check", "--root", str(tmp_path)]) == 1
    assert sql_schema.main(["--write", "--root", str(tmp_path)]) == 0
    assert copy.read_text() == (REPO / "template.yaml").read_text()
    assert sql_schema.main(["--check", "--root", str(tmp_path)]) == 0


def test_a_partition_without_a_projection_or_a_type_duckdb_cannot_read_is_refused():
    region = Column("region", "string", True, "a partition nobody projected")
    with pytest.raises(ValueError, match="projection"):
        sql_schema.projection_parameters((*PARTITIONS, region))
    with pytest.raises(ValueError, match="DuckDB"):
        sql_schema.glue_columns((Column("when", "timestamp", True, "no DuckDB mapping"),))


def test_duckdb_reads_every_column_and_partition_with_a_type():
    assert list(sql_schema.duckdb_columns()) == [c.name for c in COLUMNS]
    assert sql_schema.duckdb_hive_types() == {p.name: "VARCHAR" for p in PARTITIONS}
    assert sql_schema.duckdb_columns()["prefix_block_ids"] == "VARCHAR[]"
