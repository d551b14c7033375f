"""An observation's fingerprint is HMAC-SHA256 of the RFC 8785 form of its content, byte for byte.

Oracle: the `rfc8785` library (the reference JCS implementation), never capture's own encoder: a
fingerprint that drifted by one byte would make every re-sent named observation an id conflict.
"""

from __future__ import annotations

import enum
import hmac
from datetime import UTC, datetime
from decimal import Decimal
from typing import get_args

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain.capture import CaptureService, ObservationIn
from infercrane.domain.capture.fingerprint import _canonical
from infercrane.domain.identity import fingerprint_key
from infercrane.domain.tenancy import Keyring, KeySet

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)  # controls, quotes, non-BMP
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=0, max_value=1e-3),  # where repr turns to an exponent
    st.integers(-2**60, 2**60).map(float),  # integral, inside and past 2**53
    st.integers(2**53 - 10, 10**16 + 10).map(float),  # integral, up to where repr turns exponent
    st.floats(min_value=1e15, max_value=1e17),
    st.sampled_from([0.0, -0.0, 1e-4, 9.999e-5, 1e16, 1e21, 1e-7, 850.25, 0.1 + 0.2]))
ints = st.integers(0, 2**53 - 1)
content = st.fixed_dictionaries(
    {"deployment": texts, "arrival_ms": ints, "input_tokens": ints, "output_tokens": ints,
     "latency_ms": floats, "sampling_rate": floats, "streaming": st.booleans(), "outcome": texts,
     "source": texts, "timing_source": texts},
    optional={"ttft_ms": floats, "session_id": texts, "parent_session_id": texts,
              "shared_prefix_id": texts, "prefix_block_ids": st.lists(texts, max_size=5),
              "prefix_block_size": ints, "cached_input_tokens": ints, "timing_model": texts,
              "provenance": texts, "revision": texts})


@settings(max_examples=400, deadline=None)
@given(content)
def test_the_canonical_form_is_rfc8785_byte_for_byte(doc):
    assert _canonical(**doc) == rfc8785.dumps(doc)


def test_the_canonical_form_covers_every_field_of_the_content():
    # An argument the encoder left out would leave a field out of every fingerprint.
    doc = {"deployment": "d", "arrival_ms": 1, "input_tokens": 2, "output_tokens": 3,
           "latency_ms": 4.5, "sampling_rate": 0.5, "streaming": True, "outcome": "ok",
           "source": "captured", "timing_source": "observed", "ttft_ms": 1.25, "session_id": "s",
           "parent_session_id": "p", "shared_prefix_id": "x", "prefix_block_ids": ["a", "b"],
           "prefix_block_size": 16, "cached_input_tokens": 1, "timing_model": "{}",
           "provenance": "jsonl:sha256:00", "revision": "r"}
    assert _canonical(**doc) == rfc8785.dumps(doc)


def test_a_lone_surrogate_is_refused_as_the_reference_refuses_it():
    doc = {"deployment": "x", "arrival_ms": 1, "input_tokens": 2, "output_tokens": 3,
           "latency_ms": 1.5, "sampling_rate": 1.0, "streaming": False, "outcome": "ok",
           "source": "captured", "timing_source": "observed", "session_id": "\ud800"}
    for fn in (lambda d: _canonical(**d), rfc8785.dumps):
        try:
            fn(doc)
        except rfc8785.CanonicalizationError:
            continue
        raise AssertionError(f"{fn} accepted a lone surrogate")


def _numeric_fields(kind: type) -> list[str]:
    return [name for name, f in ObservationIn.model_fields.items()
            if {a for a in get_args(f.annotation) or (f.annotation,) if a is not type(None)}
            == {kind}]


class _Count(int):
    def __repr__(self) -> str:
        return "not a JSON number"

    __str__ = __repr__


class _Level(enum.IntEnum):
    ONE = 1


# 1 in each spelling: a value every count and float field of the schema accepts.
@pytest.mark.parametrize("value", [True, _Count(1), _Level.ONE, 1.0, 1, "1", Decimal(1)])
def test_the_schema_hands_the_canonical_form_exact_ints_and_floats(value):
    # `_canonical` prints numbers with `str` and `repr`, which print a subclass or a bool as
    # it likes: what the schema hands over must be exactly int or float.
    counts, floats = _numeric_fields(int), _numeric_fields(float)
    assert set(counts) >= {"input_tokens", "output_tokens"} and "latency_ms" in floats
    base = {"deployment": "chat", "arrival": "2026-11-29T19:00:00Z", "input_tokens": 9,
            "output_tokens": 9, "latency_ms": 9.0}
    for name in counts + floats:
        obs = ObservationIn.model_validate({**base, name: value})
        assert type(getattr(obs, name)) is (int if name in counts else float), name


class _Keyrings:
    def __init__(self) -> None:
        self.ring = Keyring("demo", KeySet.fresh(), KeySet.fresh())

    def get(self, tenant: str) -> Keyring:
        return self.ring


@settings(max_examples=60, deadline=None)
@given(latency=st.floats(min_value=0, max_value=86_400_000), rate=st.floats(1e-9, 1.0),
       session=texts.filter(lambda s: s.strip()), ttft=st.one_of(st.none(), st.floats(0, 1)))
def test_a_named_observation_carries_the_hmac_of_its_rfc8785_content(latency, rate, session, ttft):
    keyrings = _Keyrings()
    service = CaptureService(None, keyrings, clock=lambda: NOW)  # type: ignore[arg-type]
    item = {"observation_id": "gw-1", "deployment": "chat", "arrival": "2026-11-29T19:00:00.123Z",
            "input_tokens": 812, "output_tokens": 96, "latency_ms": latency,
            "sampling_rate": rate, "session_id": session}
    if ttft is not None:
        item["ttft_ms"] = min(ttft, latency)
    good, result = service.prepare("demo", [item])
    assert result.rejected == 0, result.errors
    expected = {"deployment": "chat", "arrival_ms": 1795978800123, "input_tokens": 812,
                "output_tokens": 96, "latency_ms": latency, "outcome": "ok", "streaming": False,
                "sampling_rate": rate, "source": "captured", "timing_source": "observed",
                "session_id": session}
    if ttft is not None:
        expected["ttft_ms"] = min(ttft, latency)
    key = fingerprint_key(keyrings.ring.identity)
    assert good[0].fingerprint == hmac.new(key, rfc8785.dumps(expected), "sha256").hexdigest()
