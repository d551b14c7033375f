"""AIPerf mooncake_trace export from a trace document."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime

from infercrane.domain.aiperf_export import mooncake_jsonl, mooncake_rows
from infercrane.domain.trace import build_trace
from infercrane.domain.windows import Window
from tests.fakes import BASE_MS, observation

WINDOW = Window(BASE_MS, BASE_MS + 86_400_000)
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def ident(value) -> str:
    # Stands in for the tenant HMAC: opaque, fixed-length, and equal for equal inputs.
    return "v1:" + hashlib.sha256(f"block-{value}".encode()).hexdigest()


def document_of(observations):
    return build_trace(deployment="coder", window=WINDOW, max_requests=100_000,
                       observations=observations, truncated=False, built_at=NOW)


def first_seen(rows_of_ids):
    numbers: dict = {}
    return [[numbers.setdefault(h, len(numbers)) for h in ids] for ids in rows_of_ids]


def test_rows_start_at_the_first_request_and_renumber_blocks_in_first_seen_order():
    obs = [observation(0, arrival_ms=BASE_MS + 5000, prefix_block_ids=(ident("x"), ident("y"))),
           observation(1, arrival_ms=BASE_MS + 5000, prefix_block_ids=(ident("x"), ident("z"))),
           observation(2, arrival_ms=BASE_MS + 7250)]
    rows = list(mooncake_rows(document_of(obs)))
    assert [r["timestamp"] for r in rows] == [0, 0, 2250]
    assert rows[0]["hash_ids"] == [0, 1]
    assert rows[1]["hash_ids"] == [0, 2]
    assert "hash_ids" not in rows[2]
    assert "session_id" not in rows[2]
    assert [r["input_length"] for r in rows] == [o.input_tokens for o in obs]
    assert [r["output_length"] for r in rows] == [o.output_tokens for o in obs]


def test_continuing_turns_carry_only_their_new_input():
    s = "v1:" + "5" * 64
    blocks1 = (ident(1), ident(2))
    blocks2 = (ident(1), ident(2), ident(3))
    obs = [observation(0, session_id=s, input_tokens=600, output_tokens=100,
                       prefix_block_ids=blocks1, prefix_block_size=512),
           observation(1, input_tokens=50),
           observation(2, session_id=s, input_tokens=1200, output_tokens=40,
                       prefix_block_ids=blocks2, prefix_block_size=512)]
    rows = list(mooncake_rows(document_of(obs)))
    assert rows[0]["session_id"] == rows[2]["session_id"] == "s1"
    assert rows[0]["input_length"] == 600
    assert rows[2]["input_length"] == 1200 - 600 - 100
    assert rows[2]["hash_ids"] == [2]  # only the block beyond the previous turn's prefix
    assert "session_id" not in rows[1]


def test_empty_trace_exports_an_empty_file():
    assert mooncake_jsonl(document_of([])) == ""


def test_mooncake_trace_round_trips_through_a_trace(shared_data):
    """Domain level: the file's rows as observations (as an importer would store them), a trace,
    and the export give back the same timestamps, lengths and prefix-sharing structure."""
    rows = [json.loads(line) for line in
            (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()]
    obs = [observation(0, observation_id=f"{n:08d}", arrival_ms=BASE_MS + r["timestamp"],
                       input_tokens=r["input_length"], output_tokens=r["output_length"],
                       prefix_block_ids=tuple(ident(h) for h in r["hash_ids"]),
                       prefix_block_size=512, source="imported", timing_source="modeled",
                       ttft_ms=None, session_id=None)
           for n, r in enumerate(rows)]
    exported = [json.loads(line) for line in mooncake_jsonl(document_of(obs)).splitlines()]
    assert len(exported) == len(rows)
    first = rows[0]["timestamp"]
    assert [e["timestamp"] for e in exported] == [r["timestamp"] - first for r in rows]
    assert [e["input_length"] for e in exported] == [r["input_length"] for r in rows]
    assert [e["output_length"] for e in exported] == [r["output_length"] for r in rows]
    assert [e["hash_ids"] for e in exported] == first_seen(r["hash_ids"] for r in rows)
    assert all(len(e["hash_ids"]) == math.ceil(e["input_length"] / 512) for e in exported)
