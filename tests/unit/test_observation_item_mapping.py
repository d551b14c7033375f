"""The observation store writes an item exactly as pynamodb would serialize its model.

`DynamoObservationStore._attributes` maps a `StoredObservation` to DynamoDB attribute values by
hand, for speed. Oracle: pynamodb's own `Model.serialize()` of `ObservationItem` holding the same
values (the schema the table was designed from), for every field present or absent, ints and
floats alike (a float written as "850" instead of "850.0" would read back as another type).
"""

from __future__ import annotations

from typing import Any, get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.adapters.dynamo.base import DynamoConfig
from infercrane.adapters.dynamo.observations import DynamoObservationStore, ObservationItem
from infercrane.domain.observation import Outcome, Source, StoredObservation, TimingSource

RETENTION_DAYS = 30
names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=20)
counts = st.integers(min_value=0, max_value=2**53)
times = st.floats(min_value=0, max_value=1e9, allow_nan=False) | st.integers(0, 10**9)


def maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


@st.composite
def observations(draw: Any) -> StoredObservation:
    return StoredObservation(
        tenant=draw(names), deployment=draw(names), observation_id=draw(names),
        arrival_ms=draw(st.integers(0, 10**13)), input_tokens=draw(counts),
        output_tokens=draw(counts), latency_ms=draw(times),
        outcome=draw(st.sampled_from(get_args(Outcome))),
        streaming=draw(st.booleans()), sampling_rate=draw(st.floats(1e-6, 1.0) | st.just(1)),
        source=draw(st.sampled_from(get_args(Source))),
        ingested_at_ms=draw(st.integers(0, 10**13)), revision=draw(maybe(names)),
        cached_input_tokens=draw(maybe(counts)), ttft_ms=draw(maybe(times)),
        provenance=draw(maybe(names)),
        timing_source=draw(st.sampled_from(get_args(TimingSource))),
        timing_model=draw(maybe(names)), session_id=draw(maybe(names)),
        parent_session_id=draw(maybe(names)), shared_prefix_id=draw(maybe(names)),
        prefix_block_ids=draw(maybe(st.lists(names, max_size=5).map(tuple))),
        prefix_block_size=draw(maybe(st.integers(1, 4096))), key_version=draw(maybe(names)),
        fingerprint=draw(maybe(names)))


def pynamodb_item(o: StoredObservation) -> dict[str, Any]:
    fields = {k: v for k, v in vars(o).items() if v is not None}
    if "prefix_block_ids" in fields:
        fields["prefix_block_ids"] = list(fields["prefix_block_ids"])
    model = ObservationItem(f"{o.tenant}#{o.deployment}", f"{o.arrival_ms:013d}#{o.observation_id}",
                            expires_at=o.ingested_at_ms // 1000 + RETENTION_DAYS * 86_400,
                            **fields)
    return model.serialize()


@settings(max_examples=300, deadline=None)
@given(observations())
def test_item_equals_pynamodb_serialization_of_the_model(o: StoredObservation) -> None:
    store = DynamoObservationStore("observations", DynamoConfig("us-east-1"), RETENTION_DAYS)
    assert store._attributes(o) == pynamodb_item(o)


def test_an_integral_float_keeps_its_point_and_an_int_does_not() -> None:
    store = DynamoObservationStore("observations", DynamoConfig("us-east-1"), RETENTION_DAYS)
    o = StoredObservation("t", "d", "i", 1, 2, 3, 850.0, "ok", True, 1, "captured", 0, ttft_ms=12)
    item = store._attributes(o)
    assert (item["latency_ms"], item["ttft_ms"], item["sampling_rate"]) == (
        {"N": "850.0"}, {"N": "12"}, {"N": "1"})
