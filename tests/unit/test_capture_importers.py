"""Importers: real trace files -> native items with stable ids, kept offsets and modelled timing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infercrane.domain.capture import CaptureService
from infercrane.domain.importers import ServiceTimeModel, read
from infercrane.errors import InvalidInput
from tests.unit.test_capture_domain import MemoryKeyrings, MemoryStore

AZURE = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
         b"2023-11-16 18:17:03.9799600,4808,10\n"
         b"2023-11-16 18:17:03.9799600,100,1\n"
         b"2023-11-16 18:17:05.0000999,3180,8\n")


def test_azure_rows_keep_absolute_times_and_get_modelled_timing():
    plan = read(AZURE, "azure-csv", "coder")
    assert [i["arrival"] for i in plan.items] == ["2023-11-16T18:17:03.979Z",
                                                  "2023-11-16T18:17:03.979Z",
                                                  "2023-11-16T18:17:05.000Z"]
    first = plan.items[0]
    assert first["timing_source"] == "modeled"
    assert (first["ttft_ms"], first["latency_ms"]) == ServiceTimeModel().timing(4808, 10)
    assert first["provenance"] == f"azure-csv:sha256:{plan.digest}"
    # Ties in arrival are broken by id, which follows file order.
    assert plan.items[0]["observation_id"] < plan.items[1]["observation_id"]


def test_start_shifts_the_first_arrival_and_keeps_every_offset():
    plan = read(AZURE, "azure-csv", "coder", start=datetime(2026, 11, 29, tzinfo=UTC))
    assert [i["arrival"] for i in plan.items] == ["2026-11-29T00:00:00.000Z",
                                                  "2026-11-29T00:00:00.000Z",
                                                  "2026-11-29T00:00:01.020Z"]


def test_ids_are_stable_per_file_and_placement():
    a, b = read(AZURE, "azure-csv", "coder"), read(AZURE, "azure-csv", "coder")
    shifted = read(AZURE, "azure-csv", "coder", start=datetime(2026, 1, 1, tzinfo=UTC))
    assert [i["observation_id"] for i in a.items] == [i["observation_id"] for i in b.items]
    assert a.items[0]["observation_id"] != shifted.items[0]["observation_id"]
    other = read(AZURE + b"2023-11-16 18:17:06.0,1,1\n", "azure-csv", "coder")
    assert other.items[0]["observation_id"] != a.items[0]["observation_id"]


def test_unreadable_rows_are_reported_with_their_line():
    plan = read(AZURE + b"garbage,row\n", "azure-csv", "coder")
    assert len(plan.items) == 3
    assert plan.errors == [{"index": 3, "line": 5, "field": None, "code": "unreadable_record",
                            "message": "This line is not a valid azure-csv row."}]


def test_mooncake_needs_a_start_and_hmacs_nothing_itself():
    data = b'{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}\n' \
           b'{"timestamp": 40, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]}\n'
    with pytest.raises(InvalidInput) as missing:
        read(data, "mooncake-jsonl", "chat")
    assert missing.value.field == "start"
    plan = read(data, "mooncake-jsonl", "chat", start=datetime(2026, 11, 29, tzinfo=UTC))
    assert [i["arrival"] for i in plan.items] == ["2026-11-29T00:00:00.000Z",
                                                  "2026-11-29T00:00:00.040Z"]
    assert plan.items[1]["prefix_block_ids"] == [0, 2]
    assert plan.items[1]["prefix_block_size"] == 512


def test_jsonl_import_refuses_body_fields_before_anything_is_sent():
    data = (json.dumps({"arrival": "2026-11-29T00:00:00Z", "input_tokens": 1, "output_tokens": 1,
                        "latency_ms": 5, "prompt": "secret"}) + "\n").encode()
    plan = read(data, "jsonl", "chat")
    assert plan.items == []
    assert plan.errors[0]["code"] == "body_field_refused"
    assert "secret" not in json.dumps(plan.errors)


def test_real_traces_import_without_a_rejection(shared_data: Path):
    capture = CaptureService(MemoryStore(), MemoryKeyrings("demo"),
                             clock=lambda: datetime(2026, 11, 29, tzinfo=UTC))
    azure = read((shared_data / "azure_llm_inference_2023_code.csv").read_bytes(), "azure-csv", "az")
    mooncake = read((shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_bytes(),
                    "mooncake-jsonl", "mc", start=datetime(2026, 11, 1, tzinfo=UTC))
    assert (len(azure.items), len(mooncake.items)) == (8819, 3993)
    for plan in (azure, mooncake):
        for offset in range(0, len(plan.items), 500):
            result = capture.ingest("demo", plan.items[offset:offset + 500])
            assert result.rejected == 0, result.errors[:3]
