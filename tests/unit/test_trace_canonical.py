"""The fast canonical serializer is byte-identical to the RFC 8785 reference (`rfc8785`)
wherever it answers, and answers for every trace document shape."""

from __future__ import annotations

import json
import math
import struct
from datetime import UTC, datetime

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from infercrane.domain.digest import canonical_bytes, fast_canonical_bytes
from infercrane.domain.trace import build_trace
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
