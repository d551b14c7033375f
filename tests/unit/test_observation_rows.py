"""The segment row schema covers every stored field, once, and a row reads back as it was."""

from __future__ import annotations

import dataclasses
import json

import pytest

from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import COLUMNS, PARTITIONS, from_row, from_rows, to_row


def _obs(**over: object) -> StoredObservation:
    base: dict[str, object] = {
        "tenant": "acme", "deployment": "coder", "observation_id": "imp-1",
        "arrival_ms": 1_700_000_000_123, "input_tokens": 812, "output_tokens": 96,
        "latency_ms": 1840.5, "outcome": "ok", "streaming": True, "sampling_rate": 1.0,
        "source": "imported", "ingested_at_ms": 1_700_000_001_000}
    base.update(over)
    return StoredObservation(**base)  # type: ignore[arg-type]


def test_columns_and_partitions_name_every_stored_field_exactly_once() -> None:
    names = [c.name for c in COLUMNS] + [p.name for p in PARTITIONS if p.name in
                                         ("tenant", "deployment")]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(StoredObservation))
    assert len(set(names)) == len(names)


def test_a_row_omits_nulls_and_reads_back_equal_through_json() -> None:
    full = _obs(revision="r1", cached_input_tokens=10, ttft_ms=120.25, provenance="jsonl:sha256:"
                + "a" * 64, timing_source="modeled", timing_model='{"name":"linear-v1"}',
                session_id="v1:" + "b" * 64, parent_session_id="v1:" + "c" * 64,
                shared_prefix_id="v2:" + "d" * 64, prefix_block_ids=("v1:" + "e" * 64,),
                prefix_block_size=512, key_version="v1", fingerprint="f" * 64)
    for obs in (_obs(), full):
        row = json.loads(json.dumps(to_row(obs)))
        assert None not in row.values()
        assert from_row(obs.tenant, obs.deployment, row) == obs
    assert "revision" not in to_row(_obs())
    assert "tenant" not in to_row(full) and "deployment" not in to_row(full)


def test_a_segment_s_rows_read_at_once_are_the_rows_read_one_by_one() -> None:
    # from_rows merges a row of the schema's keys into a template; any other row is from_row's.
    full = _obs(revision="r1", prefix_block_ids=("v1:" + "e" * 64,), fingerprint="f" * 64)
    rows = [json.loads(json.dumps(to_row(o))) for o in (_obs(), full)]
    rows.append({**rows[0], "observation_id": "imp-2", "unknown_column": 1})  # ignored
    rows.append({**rows[1], "tenant": "other"})  # the key's tenant wins, as from_row's
    got = from_rows("acme", "coder", rows)
    assert got == [from_row("acme", "coder", r) for r in rows]
    assert got[:2] == [_obs(), full] and got[3].tenant == "acme"
    assert isinstance(got[1].prefix_block_ids, tuple)
    # Rows of the schema's keys only (a writer's): merged at once, the same observations.
    schema_rows = [*rows[:2], {**rows[1], "observation_id": "imp-3", "prefix_block_ids": []}]
    fast = from_rows("acme", "coder", iter(schema_rows))
    assert fast == [from_row("acme", "coder", r) for r in schema_rows]
    assert fast[2].prefix_block_ids == () and isinstance(fast[1].prefix_block_ids, tuple)
    for o in fast + got:  # every field, in the dataclass's order, whichever path made it
        assert list(dataclasses.asdict(o)) == list(o.__dict__)
    missing = dict(rows[0])
    del missing["outcome"]
    with pytest.raises(KeyError):
        from_rows("acme", "coder", [rows[0], missing])
    with pytest.raises(TypeError):
        from_rows("acme", "coder", [[1, 2]])
