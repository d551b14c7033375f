"""The fast canonical serializer is byte-identical to the RFC 8785 reference (`rfc8785`)
wherever it answers, and answers for every trace document shape."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from datetime import UTC, datetime

import pytest
import rfc8785
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from infercrane.domain.digest import canonical_bytes, fast_canonical_bytes, table_bytes
from infercrane.domain.trace import RECORD_FIELDS, build_trace, encode_trace, trace_record
from infercrane.domain.windows import Window
from tests.fakes import BASE_MS, observation

floats = st.floats(allow_nan=False, allow_infinity=False) | st.builds(
    lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0],
    st.integers(0, 2**64 - 1)).filter(math.isfinite)
scalars = (st.none() | st.booleans() | st.integers(-(2**60), 2**60) | floats
           | st.text(alphabet=st.characters(codec="utf-8")))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=8), inner, max_size=5),
    max_leaves=30)


def reference(value):
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        return None


@settings(max_examples=400, deadline=None)
@given(json_values)
@example(2.0**53)
@example(1e16)
@example(1e-5)
@example(-0.0)
@example({"é": 1, "z": 2, "\ue000": 3, "😀": 4})
@example("\x00\x1f\x7f\u2028\"\\/")
def test_fast_path_is_byte_identical_to_the_reference_wherever_it_answers(value):
    fast = fast_canonical_bytes(value)
    if fast is not None:
        assert fast == reference(value)


@settings(max_examples=300, deadline=None)
@given(floats)
def test_every_float_in_the_positional_range_takes_the_fast_path_identically(value):
    if value.is_integer() or 1e-4 <= abs(value) < 1e16:
        fast = fast_canonical_bytes(value)
        if fast is not None:
            assert fast == rfc8785.dumps(value)


def trace_of(observations):
    return build_trace(deployment="coder", window=Window(BASE_MS, BASE_MS + 86_400_000),
                       max_requests=1000, observations=observations, truncated=False,
                       built_at=datetime(2026, 11, 29, tzinfo=UTC))


trace_observations = st.lists(st.builds(
    lambda i, lat, ttft, rate, inp, model: observation(
        i, latency_ms=lat, ttft_ms=ttft, sampling_rate=rate, input_tokens=inp,
        timing_source="modeled" if model else "observed",
        timing_model=json.dumps(model) if model else None,
        session_id="v1:" + f"{i % 3:064x}", prefix_block_ids=("v1:" + f"{i:064x}",),
        prefix_block_size=512),
    st.integers(0, 10**5), st.floats(0, 86_400_000, allow_nan=False),
    st.none() | st.floats(0, 86_400_000, allow_nan=False),
    st.floats(1e-4, 1.0, allow_nan=False), st.integers(0, 2_000_000),
    st.none() | st.fixed_dictionaries({"name": st.just("linear-v1"),
                                       "overhead_ms": st.floats(0, 1e6, allow_nan=False),
                                       "decode_ms_per_token": st.floats(0, 1e6, allow_nan=False)})),
    max_size=20, unique_by=lambda o: o.observation_id)


@settings(max_examples=150, deadline=None)
@given(trace_observations)
def test_trace_documents_take_the_fast_path_and_match_the_reference(observations):
    document = trace_of(observations)
    fast = fast_canonical_bytes(document)
    assert fast == rfc8785.dumps(document)
    assert canonical_bytes(document) == fast


def test_values_the_reference_refuses_are_still_refused():
    from infercrane.errors import InvalidInput

    for bad in (2**60, float("nan"), {1: "non-string key"}):
        with pytest.raises(InvalidInput):
            canonical_bytes(bad)


# -- records as a table (`digest._table`, `table_bytes`): column by column, against the reference.

FIELDS = ("offset_ms", "input_tokens", "output_tokens", "cached_input_tokens", "ttft_ms",
          "latency_ms", "outcome", "streaming", "sampling_rate", "source", "revision",
          "session_id", "prefix_block_ids")
ints = st.integers(-(2**60), 2**60) | st.sampled_from(
    [0, 1, 2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 10**16])
edge_floats = st.sampled_from([0.0, -0.0, 1.0, 1.5, 0.1, 1e-4, 9.99e-5, 1e-5, 5e-324, 1e16,
                               9.9e15, 2.0**53 - 1, 2.0**53, 1e21, 123456.789, -300.0])
texts = st.text() | st.sampled_from(
    ["", "ok", "\x00\x01\x1f\x7f", "\u2028\u2029", '"\\/', "é", "😀", "\ue000", "\ud800",
     "a\udfffb", "%s", "%%"])
# Whatever a field of a record may hold, and what it should not (a record read from a file
# holds anything JSON does): None everywhere, ints and floats and bools mixed (1 == 1.0 == True).
cell = st.none() | ints | floats | edge_floats | st.booleans() | texts | st.lists(texts, max_size=3)


@st.composite
def tables(draw, values=cell, min_size=8):
    """Rows over FIELDS whose cells come from a few values per column, so a column is often
    one value throughout (encoded once) and often not."""
    count = draw(st.integers(min_size, 16))
    pools = {name: draw(st.lists(values, min_size=1, max_size=3)) for name in FIELDS}
    return [{name: draw(st.sampled_from(pool)) for name, pool in pools.items()}
            for _ in range(count)]


def as_columns(rows):
    return {name: [row[name] for row in rows] for name in rows[0]} if rows else {}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
@example([{"a": 1, "b": None}] * 4 + [{"a": 1.0, "b": -0.0}] * 4)
@example([{"a": True}] * 4 + [{"a": 1}] * 4)
@example([{"a": 0.0}] * 7 + [{"a": -0.0}])
@example([{"a": "\ud800"}] * 8)
@example([{"a": 2**53}] * 8)
@example([{"a": 1e-5}] * 8)
@example([{"é": 1}] * 8)
def test_a_table_of_records_is_byte_identical_to_the_reference_or_refused(rows):
    expected = reference(rows)
    fast = fast_canonical_bytes(rows)  # a list of >= 8 dicts: tried as a table first
    chunks = table_bytes(as_columns(rows), len(rows))
    direct = None if chunks is None else b"".join(chunks)
    if expected is None:  # the reference refuses (surrogates, big ints): so does the fast path
        assert fast is None
        assert direct is None
    else:
        assert fast in (None, expected)
        assert direct in (None, expected)
        assert canonical_bytes(rows) == expected


# What a trace record holds: every value here has a guaranteed fast encoding.
record_cells = (st.none() | st.integers(-(2**53 - 1), 2**53 - 1) | st.booleans()
                | st.floats(1e-4, 1e15) | st.floats(-1e15, -1e-4)
                | st.integers(-(2**53 - 1), 2**53 - 1).map(float)
                | st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e-4, 2.0**53 - 1])
                | st.text(alphabet=st.characters(codec="utf-8"))
                | st.lists(st.text(alphabet=st.characters(codec="utf-8")), max_size=3))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(record_cells, min_size=1))
def test_records_of_guaranteed_values_take_the_table_and_match_the_reference(rows):
    assert b"".join(table_bytes(as_columns(rows), len(rows)) or [b"refused"]) == rfc8785.dumps(rows)


def test_every_field_of_a_record_is_a_record_field():
    assert tuple(trace_record(observation(1), BASE_MS)) == RECORD_FIELDS


@pytest.mark.parametrize("chunk_rows", [7, 1000])
@pytest.mark.parametrize("order", ["ordered", "shuffled"])
def test_an_encoded_trace_is_the_reference_bytes_of_its_document(monkeypatch, order, chunk_rows):
    from infercrane.domain import digest

    monkeypatch.setattr(digest, "_CHUNK_ROWS", chunk_rows)  # 30 records: 5 chunks, or 1
    observations = [observation(i, ttft_ms=None if i % 4 else 0.5 + i, latency_ms=250.0 + i / 8,
                                session_id=f"s-{i % 3}", prefix_block_ids=[f"b{i % 5}"])
                    for i in range(30)]
    if order == "shuffled":
        observations = observations[7:] + observations[:7]
    encoded = encode_trace(deployment="coder", window=Window(BASE_MS, BASE_MS + 86_400_000),
                           max_requests=1000, observations=observations, truncated=False,
                           built_at=datetime(2026, 11, 29, tzinfo=UTC))
    document = encoded.document
    assert [r["offset_ms"] for r in document["records"]] == [100 * i for i in range(30)]
    assert b"".join(encoded.records) == rfc8785.dumps(document["records"])
    assert b"".join(encoded.chunks()) == rfc8785.dumps(document)
    content = {k: v for k, v in document.items() if k not in ("digest", "build")}
    assert document["digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    assert encoded.blocks() == {name: hashlib.sha256(rfc8785.dumps(value)).hexdigest()
                                for name, value in document.items() if name != "digest"}
    assert type(document["records"][0]["latency_ms"]) is float  # served values unchanged


def test_an_empty_table_is_an_empty_array():
    assert table_bytes({}, 0) == [b"[]"]
    assert rfc8785.dumps([]) == b"[]"
