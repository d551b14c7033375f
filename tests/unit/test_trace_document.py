"""The trace document: what it records, truncation, evidence class, schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import jsonschema
import pytest

from infercrane.domain.replay import TraceService
from infercrane.domain.trace import build_trace, json_schema
from infercrane.domain.windows import Window
from infercrane.errors import NotFound
from tests.fakes import (
    BASE_MS,
    FakeDocumentStore,
    FakeObservationStore,
    FakeTraceStore,
    local_signer,
    observation,
)

WINDOW = Window(BASE_MS, BASE_MS + 60_000)
NOW = datetime.fromtimestamp(WINDOW.end_ms / 1000, UTC)


def service_with(observations):
    store = FakeObservationStore()
    store.put_many(observations)
    return TraceService(store, FakeTraceStore(), FakeDocumentStore(), signer=local_signer())


def build(observations, truncated=False):
    return build_trace(deployment="coder", window=WINDOW, max_requests=100,
                       observations=observations, truncated=truncated, built_at=NOW)


def test_document_matches_its_json_schema():
    obs = [observation(i, session_id="v1:" + "a" * 64, prefix_block_ids=("v1:" + "b" * 64,),
                       prefix_block_size=512, cached_input_tokens=5) for i in range(5)]
    jsonschema.validate(build(obs), json_schema())


def test_an_empty_window_of_a_known_deployment_is_refused_naming_the_window():
    # The deployment was seen a day before the window: known, but nothing in this window. An
    # empty document would be labelled `observed`; the service refuses it (docs/trace.md).
    earlier = observation(0, arrival_ms=BASE_MS - 86_400_000)
    with pytest.raises(NotFound) as raised:
        service_with([earlier]).build_document("demo", "coder", "30m", None, 10, NOW)
    assert raised.value.field == "window"


def test_truncation_keeps_the_earliest_in_arrival_then_id_order():
    same_ms = BASE_MS + 500
    observations = [observation(0, observation_id="z", arrival_ms=same_ms, input_tokens=1),
                    observation(1, observation_id="a", arrival_ms=same_ms, input_tokens=2),
                    observation(2, observation_id="m", arrival_ms=BASE_MS + 100, input_tokens=3),
                    observation(3, observation_id="b", arrival_ms=BASE_MS + 900, input_tokens=4)]
    document = service_with(observations).build_document("demo", "coder", "1m", NOW, 2, NOW)
    assert document["truncated"] is True
    assert [r["input_tokens"] for r in document["records"]] == [3, 2]  # m@100, then a@500 < z@500
    assert [r["offset_ms"] for r in document["records"]] == [100, 500]


def test_a_window_holding_exactly_max_requests_is_not_truncated():
    document = service_with([observation(i) for i in range(3)]).build_document(
        "demo", "coder", "1m", NOW, 3, NOW)
    assert document["sample_count"] == 3
    assert document["truncated"] is False


def test_window_bounds_are_half_open():
    inside, at_end = observation(0, arrival_ms=WINDOW.start_ms), observation(1, arrival_ms=WINDOW.end_ms)
    document = service_with([inside, at_end]).build_document("demo", "coder", "1m", NOW, 10, NOW)
    assert document["sample_count"] == 1
    assert document["records"][0]["offset_ms"] == 0


def test_evidence_is_observed_only_when_every_record_was_captured():
    captured = [observation(i) for i in range(3)]
    assert build(captured)["evidence_class"] == "observed"
    mixed = [*captured, observation(9, source="imported", provenance="azure-csv:sha256:" + "0" * 64)]
    document = build(mixed)
    assert document["evidence_class"] == "imported"
    assert document["provenance"] == ["azure-csv:sha256:" + "0" * 64]


def test_modeled_timing_is_marked_with_its_parameters():
    params = {"kind": "linear", "base_ms": 50, "per_output_token_ms": 20}
    obs = [observation(0), observation(1, timing_source="modeled", timing_model=json.dumps(params))]
    document = build(obs)
    assert document["timing_source"] == "modeled"
    assert document["timing_models"] == [params]
    assert build([observation(0)])["timing_source"] == "observed"


def test_records_keep_identities_as_stored_and_key_versions_are_listed():
    ident = "v2:" + "9" * 64
    obs = observation(0, session_id=ident, parent_session_id=ident, shared_prefix_id=ident,
                      prefix_block_ids=(ident,), prefix_block_size=16, key_version="v2")
    document = build([obs, observation(1, sampling_rate=0.25)])
    record = document["records"][0]
    assert (record["session_id"], record["parent_session_id"], record["shared_prefix_id"]) == (
        ident, ident, ident)
    assert record["prefix_block_ids"] == [ident]
    assert record["prefix_block_size"] == 16
    assert document["key_versions"] == ["v1", "v2"]
    assert document["sampling_rates"] == [0.25, 1.0]


def test_rate_counts_the_arrival_span_and_the_window_is_shown_apart():
    obs = [observation(i) for i in range(10)]  # 100 ms apart from the window start
    truncated = build(obs[:5], truncated=True)
    assert truncated["statistics"]["request_rate_per_s"] == pytest.approx(5 / 0.4)
    whole = build(obs)
    assert whole["statistics"]["request_rate_per_s"] == pytest.approx(10 / 0.9)
    assert whole["statistics"]["arrival_span_ms"] == 900
    assert whole["window"]["duration_ms"] == 60_000
