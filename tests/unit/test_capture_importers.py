"""Importers: public trace formats -> native items with stable ids, kept offsets, sessions, and
modelled timing. Each format rule is checked on the vendored public traces where one applies."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from infercrane.adapters.trace_files import azure_time_ns, scan, stream_rows
from infercrane.adapters.trace_input import TraceInput
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.capture import CaptureService
from infercrane.domain.importers import (
    ImportOptions,
    Placement,
    RowError,
    RowIdentity,
    ServiceTimeModel,
    import_id,
    observation_id,
    observation_item,
)
from infercrane.domain.imports import id_prefix, options_digest
from infercrane.domain.trace import build_trace
from infercrane.domain.windows import Window
from infercrane.errors import InvalidInput
from tests.unit.test_capture_domain import MemoryKeyrings, MemoryStore

AZURE = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
         b"2023-11-16 18:17:03.9799600,4808,10\n"
         b"2023-11-16 18:17:03.9799600,100,1\n"
         b"2023-11-16 18:17:05.0000999,3180,8\n")
START = datetime(2026, 11, 29, tzinfo=UTC)


def read(tmp_path: Path, data: bytes, fmt: str, **options: Any) -> dict[str, Any]:
    """What `capture import` does with a file, short of sending it: scan, check, place, build."""
    path = tmp_path / f"trace.{fmt}"
    path.write_bytes(data)
    source = TraceInput(str(path))
    facts = scan(source, ImportOptions(fmt, options.pop("deployment", "d"), **options))
    opts = facts.options
    placement = Placement(opts.start, facts.first_ns, relative=fmt == "mooncake-jsonl")
    ref = import_id(facts.rows_sha256, opts)
    prefix, identity = id_prefix(fmt, opts.recorded(), facts.rows_sha256), RowIdentity()
    provenance = f"{fmt}:sha256:{options_digest(fmt, opts.recorded())}"
    items, errors = [], []
    for row in stream_rows(source, opts):
        if isinstance(row, RowError):
            errors.append(row)
        else:
            ident = observation_id(prefix, opts.deployment,
                                   identity.row_key(row.content, row.arrival_ns),
                                   placement.placed_ns(row.arrival_ns))
            items.append(observation_item(row, opts, ident, provenance, placement))
    assert identity.digest() == facts.rows_sha256
    return {"items": items, "errors": errors, "facts": facts, "import_id": ref}


def azure_2024(csv_2023: str) -> str:
    """The 2024 Azure LLM inference trace form of a 2023 file: 6-digit fraction and an offset."""
    return re.sub(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{6})\d,", r"\1.\2+00:00,", csv_2023,
                  flags=re.M)


def test_azure_rows_keep_absolute_times_and_get_modelled_timing(tmp_path):
    got = read(tmp_path, AZURE, "azure-csv")
    assert [i["arrival"] for i in got["items"]] == ["2023-11-16T18:17:03.979Z",
                                                    "2023-11-16T18:17:03.979Z",
                                                    "2023-11-16T18:17:05.000Z"]
    first = got["items"][0]
    assert first["timing_source"] == "modeled"
    assert (first["ttft_ms"], first["latency_ms"]) == ServiceTimeModel().timing(4808, 10)
    # The reader and its options, nothing of the file: the same for the same rows from any file.
    assert re.fullmatch(r"azure-csv:sha256:[0-9a-f]{64}", first["provenance"])
    assert len({i["observation_id"] for i in got["items"]}) == 3
    # Ties in arrival are broken by id, which keeps the file's order among rows of one instant.
    assert got["items"][0]["observation_id"] < got["items"][1]["observation_id"]
    assert got["facts"].stats.header_lines == 1 and got["errors"] == []


def test_azure_2024_timestamps_read_like_the_2023_ones_on_the_vendored_trace(tmp_path,
                                                                            shared_data):
    text_2023 = (shared_data / "azure_llm_inference_2023_code.csv").read_text()
    text_2024 = azure_2024(text_2023)
    assert "+00:00," in text_2024.splitlines()[1]
    old = read(tmp_path, text_2023.encode(), "azure-csv")
    new = read(tmp_path, text_2024.encode(), "azure-csv")
    assert new["errors"] == [] and len(new["items"]) == 8819
    # The 2023 form has 100 ns more precision, which the millisecond arrival never shows.
    assert [(i["arrival"], i["input_tokens"], i["output_tokens"]) for i in new["items"]] == [
        (i["arrival"], i["input_tokens"], i["output_tokens"]) for i in old["items"]]


def test_azure_time_offsets_are_applied_and_the_fraction_is_exact():
    utc = azure_time_ns("2024-05-10 00:00:00.009930+00:00")
    assert utc == 1_715_299_200_009_930_000
    assert azure_time_ns("2024-05-10 02:00:00.009930+02:00") == utc
    assert azure_time_ns("2023-11-16 18:17:03.9799600") % 1_000_000_000 == 979_960_000


def test_an_unreadable_azure_time_is_named_with_the_forms_it_may_take(tmp_path):
    got = read(tmp_path, AZURE + b"16/05/2024 00:00,1,1\n" + b"2024-05-10 00:00:00,x,1\n",
               "azure-csv")
    assert len(got["items"]) == 3
    assert [(e.line, e.field, e.code) for e in got["errors"]] == [
        (5, "TIMESTAMP", "invalid_format"), (6, "ContextTokens", "invalid_type")]
    assert "YYYY-MM-DD HH:MM:SS" in got["errors"][0].message


def test_a_repeated_header_is_a_header_not_a_rejected_record(tmp_path):
    joined = AZURE + AZURE.splitlines(keepends=True)[0] + b"2023-11-16 18:17:06.0,1,1\n"
    got = read(tmp_path, joined, "azure-csv")
    assert (len(got["items"]), got["errors"], got["facts"].stats.header_lines) == (4, [], 2)
    mooncake = b"timestamp,input_length,output_length\n" \
               b'{"timestamp": 0, "input_length": 10, "output_length": 1}\n'
    got = read(tmp_path, mooncake, "mooncake-jsonl", start=START)
    assert (len(got["items"]), got["errors"], got["facts"].records) == (1, [], 1)


def test_start_shifts_the_first_arrival_and_keeps_every_offset(tmp_path):
    got = read(tmp_path, AZURE, "azure-csv", start=START)
    assert [i["arrival"] for i in got["items"]] == ["2026-11-29T00:00:00.000Z",
                                                    "2026-11-29T00:00:00.000Z",
                                                    "2026-11-29T00:00:01.020Z"]


def test_import_ids_follow_the_file_and_every_option_that_changes_what_is_stored(tmp_path):
    a, b = read(tmp_path, AZURE, "azure-csv"), read(tmp_path, AZURE, "azure-csv")
    assert a["import_id"] == b["import_id"]
    assert [i["observation_id"] for i in a["items"]] == [i["observation_id"] for i in b["items"]]
    others = [read(tmp_path, AZURE, "azure-csv", start=START),
              read(tmp_path, AZURE, "azure-csv", model=ServiceTimeModel(overhead_ms=1)),
              read(tmp_path, AZURE, "azure-csv", revision="r2"),
              read(tmp_path, AZURE + b"2023-11-16 18:17:06.0,1,1\n", "azure-csv")]
    assert len({a["import_id"], *(o["import_id"] for o in others)}) == 5


def test_mooncake_needs_a_start_and_records_the_block_size(tmp_path):
    data = b'{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}\n' \
           b'{"timestamp": 40, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]}\n'
    with pytest.raises(InvalidInput) as missing:
        read(tmp_path, data, "mooncake-jsonl")
    assert missing.value.field == "start"
    got = read(tmp_path, data, "mooncake-jsonl", start=START)
    assert [i["arrival"] for i in got["items"]] == ["2026-11-29T00:00:00.000Z",
                                                    "2026-11-29T00:00:00.040Z"]
    assert got["items"][1]["prefix_block_ids"] == [0, 2]
    assert got["items"][1]["prefix_block_size"] == 512
    small = read(tmp_path, data, "mooncake-jsonl", start=START, block_size=16)
    assert {i["prefix_block_size"] for i in small["items"]} == {16}
    assert small["import_id"] != got["import_id"]


def test_mooncake_text_fields_are_dropped_and_counted_never_sent(tmp_path):
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 2, "text_input": "CANARY-1"},
            {"timestamp": 5, "input_length": 12, "output_length": 2,
             "messages": [{"role": "user", "content": "CANARY-2"}]},
            {"timestamp": 9, "text_input": "CANARY-3", "output_length": 2}]
    got = read(tmp_path, "".join(json.dumps(r) + "\n" for r in rows).encode(),
               "mooncake-jsonl", start=START)
    assert dict(got["facts"].stats.dropped_fields) == {"text_input": 2, "messages": 1}
    assert len(got["items"]) == 2
    assert [(e.line, e.field, e.code) for e in got["errors"]] == [(3, "input_length", "missing")]
    assert "CANARY" not in json.dumps(got["items"]) + repr(got["errors"])


def test_seconds_timestamps_are_refused_unless_the_unit_is_given(tmp_path):
    seconds = "".join(json.dumps({"timestamp": round(n * 0.37, 2), "input_length": 100,
                                  "output_length": 10}) + "\n" for n in range(200)).encode()
    with pytest.raises(InvalidInput) as refused:
        read(tmp_path, seconds, "mooncake-jsonl", start=START)
    assert refused.value.field == "timestamp_unit"
    got = read(tmp_path, seconds, "mooncake-jsonl", start=START, timestamp_unit="s")
    assert got["items"][-1]["arrival"] == "2026-11-29T00:01:13.630Z"  # 199 x 0.37 s
    epoch = b'{"timestamp": 1715299200.5, "input_length": 1, "output_length": 1}\n'
    with pytest.raises(InvalidInput):
        read(tmp_path, epoch, "mooncake-jsonl", start=START)


def test_the_vendored_mooncake_trace_is_unambiguous_milliseconds(tmp_path, shared_data):
    data = (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_bytes()
    got = read(tmp_path, data, "mooncake-jsonl", start=START)
    last = json.loads(data.splitlines()[-1])["timestamp"]
    assert got["items"][-1]["arrival"] == datetime.fromtimestamp(
        START.timestamp() + last / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def test_sessions_accumulate_history_and_delays_follow_the_previous_turn(tmp_path):
    model = ServiceTimeModel()
    rows = [{"timestamp": 0, "session_id": "a", "input_length": 100, "output_length": 20,
             "hash_ids": [1]},
            {"session_id": "a", "delay": 500, "input_length": 30, "output_length": 5,
             "hash_ids": [2]}]
    got = read(tmp_path, "".join(json.dumps(r) + "\n" for r in rows).encode(),
               "mooncake-jsonl", start=START)
    first, second = got["items"]
    assert (first["session_id"], second["session_id"]) == ("a", "a")
    assert second["input_tokens"] == 30 + 100 + 20
    assert second["prefix_block_ids"] == [1, 2]
    _, latency = model.timing(100, 20)
    assert second["arrival"] == datetime.fromtimestamp(
        START.timestamp() + (latency + 500) / 1000, UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def test_jsonl_import_refuses_body_fields_before_anything_is_sent(tmp_path):
    data = (json.dumps({"arrival": "2026-11-29T00:00:00Z", "input_tokens": 1, "output_tokens": 1,
                        "latency_ms": 5, "prompt": "secret"}) + "\n").encode()
    got = read(tmp_path, data, "jsonl")
    assert got["items"] == []
    assert got["errors"][0].code == "body_field_refused"
    assert "secret" not in repr(got["errors"])


def ingest(capture: CaptureService, items: list[dict[str, Any]]) -> None:
    for offset in range(0, len(items), 500):
        result = capture.ingest("demo", items[offset:offset + 500])
        assert result.rejected == 0, result.errors[:3]


def test_real_traces_import_without_a_rejection(tmp_path, shared_data: Path):
    capture = CaptureService(MemoryStore(), MemoryKeyrings("demo"),
                             clock=lambda: datetime(2026, 11, 29, tzinfo=UTC))
    azure = read(tmp_path, (shared_data / "azure_llm_inference_2023_code.csv").read_bytes(),
                 "azure-csv", deployment="az")
    mooncake = read(tmp_path, (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_bytes(),
                    "mooncake-jsonl", deployment="mc", start=datetime(2026, 11, 1, tzinfo=UTC))
    assert (len(azure["items"]), len(mooncake["items"])) == (8819, 3993)
    for got in (azure, mooncake):
        ingest(capture, got["items"])


def trace_of(tmp_path: Path, data: bytes, deployment: str) -> dict[str, Any]:
    store = MemoryStore()
    capture = CaptureService(store, MemoryKeyrings("demo"), clock=lambda: START)
    got = read(tmp_path, data, "mooncake-jsonl", deployment=deployment,
               start=datetime(2026, 11, 28, tzinfo=UTC))
    ingest(capture, got["items"])
    window = Window(int(datetime(2026, 11, 28, tzinfo=UTC).timestamp() * 1000),
                    int(START.timestamp() * 1000))
    found = list(store.query("demo", deployment, window.start_ms, window.end_ms))
    return build_trace(deployment=deployment, window=window, max_requests=1000,
                       observations=found, truncated=False, built_at=START)


def test_sessions_survive_export_and_reimport(tmp_path, shared_data):
    """Two sessions interleaved with the vendored trace's first rows: import, trace, export to
    mooncake_trace, import the export again: the statistics and the export itself are equal."""
    base = [json.loads(line) for line in
            (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()[:6]]
    rows = []
    for n, row in enumerate(base):
        session = "alpha" if n % 2 == 0 else "beta"
        rows.append({**row, "session_id": session, "input_length": 150 + 25 * n,
                     "hash_ids": row["hash_ids"][:1]})
    source = "".join(json.dumps(r) + "\n" for r in rows).encode()
    first = trace_of(tmp_path, source, "sessions-a")
    exported = mooncake_jsonl(first)
    second = trace_of(tmp_path, exported.encode(), "sessions-b")
    assert first["statistics"]["sessions"] == second["statistics"]["sessions"] == 2
    for name in ("input_tokens", "output_tokens"):
        assert first["statistics"][name] == second["statistics"][name]
    assert first["statistics"]["block_repeat_ratio"] == second["statistics"]["block_repeat_ratio"]
    assert mooncake_jsonl(second) == exported


def test_otlp_json_is_read_one_document_a_line_or_one_pretty_printed_document(tmp_path):
    from tests.unit.test_capture_otlp import CANARY, json_export

    doc = json_export()
    lines = read(tmp_path, (json.dumps(doc) + "\n" + "not json\n" + json.dumps(doc) + "\n")
                 .encode(), "otlp-json")
    # The same document twice: identical rows, told apart by their ordinal.
    assert len({i["observation_id"] for i in lines["items"]}) == len(lines["items"]) == 2
    assert [(e.line, e.code) for e in lines["errors"]] == [(2, "unreadable_record")]
    assert lines["items"][0]["arrival"] == "2025-11-29T20:00:00.123Z"
    pretty = read(tmp_path, json.dumps(doc, indent=2).encode(), "otlp-json")
    assert len(pretty["items"]) == 1 and pretty["errors"] == []
    assert CANARY not in json.dumps(lines["items"] + pretty["items"])


@pytest.mark.parametrize("when", [
    datetime(1970, 1, 1, tzinfo=UTC), datetime(2023, 11, 16, 18, 17, 3, 979960, tzinfo=UTC),
    datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)])
def test_a_placed_arrival_is_written_as_rfc3339_with_its_milliseconds_truncated(when) -> None:
    # Arrival texts are built from a cached text per second; they must read as datetime's own
    # isoformat does (millisecond precision, truncated, `Z`), the first and last second included.
    from infercrane.domain.importers import Placement

    ns = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000 + 999
    expected = when.replace(microsecond=when.microsecond // 1000 * 1000).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    placement = Placement(None, None, relative=False)
    assert placement.arrival(ns) == expected
    assert placement.arrival(ns) == expected  # the cached second again


def test_a_placed_arrival_outside_what_a_clock_holds_is_clamped_not_an_error() -> None:
    from infercrane.domain.importers import Placement

    placement = Placement(None, None, relative=False)
    assert placement.arrival(-5) == "1970-01-01T00:00:00.000Z"
    assert placement.arrival(10**30).startswith("9999-12-31T23:59:59.999")
