"""Asynchronous trace builds: the streamed document is the synchronous one, byte for byte in its
canonical form, and large windows are queued instead of built inside the request.

Oracles: `build_trace` (the synchronous build) and the `rfc8785` reference library for the
canonical bytes; `compute_statistics` for the one-pass statistics.
"""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain.replay import TraceService, document_key
from infercrane.domain.stats import StatisticsAccumulator, compute_statistics
from infercrane.domain.trace import build_trace, trace_header
from infercrane.domain.trace_stream import StreamingTraceBuilder
from infercrane.domain.windows import Window
from infercrane.errors import InvalidInput, NotFound
from tests.fakes import (
    BASE_MS,
    FakeDocumentStore,
    FakeObservationStore,
    FakeQueue,
    FakeTraceBuildStore,
    FakeTraceStore,
    local_signer,
    observation,
)

NOW = datetime.fromtimestamp((BASE_MS + 3_600_000) / 1000, UTC)
WINDOW = Window(BASE_MS, BASE_MS + 3_600_000)


def varied(i: int):
    """Observations that exercise every field the document summarizes."""
    return observation(
        i, session_id=f"s-{i % 3}" if i % 4 else None, ttft_ms=None if i % 5 == 0 else 0.00001 * i,
        latency_ms=None if i % 7 == 0 else 250.0 + (i * 37) % 900,
        prefix_block_ids=[f"b{j}" for j in range(i % 3, i % 3 + 3)] if i % 2 else None,
        prefix_block_size=512 if i % 2 else None, source="imported" if i == 5 else "captured",
        timing_source="modeled" if i % 6 == 1 else "observed",
        timing_model=json.dumps({"model": "linear", "é": i % 2}) if i % 6 == 1 else None,
        key_version=f"v{i % 2 + 1}", provenance="azure-csv" if i % 9 == 0 else None,
        sampling_rate=0.5 if i % 8 == 0 else 1.0)


def streamed(observations, *, max_requests: int, truncated: bool):
    builder = StreamingTraceBuilder(deployment="coder", window=WINDOW, max_requests=max_requests,
                                    spool=io.BytesIO())
    for o in observations:
        builder.add(o)
    return builder.finish(truncated=truncated, built_at=NOW, request_id="r-1", software="t")


@pytest.mark.parametrize(("n", "max_requests", "truncated"), [(0, 10, False), (1, 10, False),
                                                              (57, 100, False), (40, 40, True)])
def test_streamed_document_is_the_sync_document_in_canonical_form(n, max_requests, truncated):
    observations = [varied(i) for i in range(n)]
    document = build_trace(deployment="coder", window=WINDOW, max_requests=max_requests,
                           observations=observations, truncated=truncated, built_at=NOW,
                           request_id="r-1", software="t")
    result = streamed(observations, max_requests=max_requests, truncated=truncated)
    body = b"".join(result.chunks())
    assert result.digest == document["digest"]
    assert body == rfc8785.dumps(document)
    assert result.size_bytes == len(body)
    assert result.header == trace_header(document, size_bytes=len(body))
    # The blocks the statement signs, against the reference's canonical bytes of each field.
    assert result.blocks == {name: hashlib.sha256(rfc8785.dumps(value)).hexdigest()
                             for name, value in document.items() if name != "digest"}


@pytest.mark.parametrize("batch", [1, 8, 10])
def test_records_encoded_in_batches_join_into_the_reference_bytes(monkeypatch, batch):
    """Batches of 8 or more are encoded as tables, smaller ones value by value; the commas
    between batches make one array either way."""
    from infercrane.domain import trace_stream

    monkeypatch.setattr(trace_stream, "ENCODE_BATCH", batch)
    observations = [observation(i, ttft_ms=None if i % 3 else 12.25 * i, latency_ms=200.0 + i,
                                session_id=f"s-{i % 4}", sampling_rate=0.5 if i % 5 else 1.0)
                    for i in range(37)]
    document = build_trace(deployment="coder", window=WINDOW, max_requests=100,
                           observations=observations, truncated=False, built_at=NOW,
                           request_id="r-1", software="t")
    result = streamed(observations, max_requests=100, truncated=False)
    assert b"".join(result.chunks()) == rfc8785.dumps(document)
    assert result.digest == document["digest"]


def test_observations_out_of_order_are_refused():
    builder = StreamingTraceBuilder(deployment="coder", window=WINDOW, max_requests=10,
                                    spool=io.BytesIO())
    builder.add(observation(2))
    with pytest.raises(InvalidInput):
        builder.add(observation(1))


record = st.fixed_dictionaries({
    "offset_ms": st.integers(0, 10_000), "input_tokens": st.integers(0, 10**6),
    "output_tokens": st.integers(0, 10**5),
    "ttft_ms": st.none() | st.floats(0, 1e5, allow_nan=False),
    "latency_ms": st.none() | st.floats(0, 1e5, allow_nan=False),
    "session_id": st.none() | st.sampled_from(["a", "b", "c"]),
    "prefix_block_ids": st.none() | st.lists(st.sampled_from(["x", "y", "z", "w"]), max_size=4)})


@settings(max_examples=60, deadline=None)
@given(st.lists(record, max_size=30))
def test_one_pass_statistics_equal_compute_statistics(records):
    records = sorted(records, key=lambda r: r["offset_ms"])
    accumulator = StatisticsAccumulator()
    for start in range(0, len(records), 7):  # in batches, as a streamed build adds them
        accumulator.extend(records[start:start + 7])
    assert accumulator.result() == compute_statistics(records)


def test_one_pass_statistics_take_token_counts_a_store_hands_back_as_decimals():
    # DynamoDB's numbers come back as Decimals: the accumulator's int arrays refuse them part
    # way through a batch, and what was appended before the refused value must not stay.
    records = [{"offset_ms": i, "input_tokens": Decimal(100 + i) if i % 3 else 100 + i,
                "output_tokens": True if i == 4 else 7 * i, "ttft_ms": None,
                "latency_ms": float(i), "session_id": None, "prefix_block_ids": None}
               for i in range(10)]
    accumulator = StatisticsAccumulator()
    accumulator.extend(records[:6])
    accumulator.extend(records[6:])
    assert accumulator.result() == compute_statistics(records)
    assert accumulator.result()["input_tokens"]["max"] == 109


@pytest.fixture
def service_parts():
    store, traces, documents = FakeObservationStore(), FakeTraceStore(), FakeDocumentStore()
    builds, queue = FakeTraceBuildStore(), FakeQueue()
    service = TraceService(store, traces, documents, builds=builds, build_queue=queue,
                           signer=local_signer(),
                           sync_limit=10, spool=io.BytesIO)
    return store, traces, documents, builds, queue, service


def test_a_window_within_the_limit_is_built_in_the_request(service_parts):
    store, _, _, _, queue, service = service_parts
    store.put_many([varied(i) for i in range(10)])
    outcome = service.request_build("demo", "coder", "1h", NOW, 1000, NOW, "r-1")
    assert outcome.header is not None
    assert outcome.header["sample_count"] == 10
    assert outcome.created
    assert queue.sent == []


def test_a_larger_window_is_queued_and_built_to_the_same_digest(service_parts):
    store, traces, documents, builds, queue, service = service_parts
    store.put_many([varied(i) for i in range(25)])
    sync = TraceService(store, FakeTraceStore(), FakeDocumentStore(), signer=local_signer())
    expected, _ = sync.build("demo", "coder", "1h", NOW, 20, NOW)

    outcome = service.request_build("demo", "coder", "1h", NOW, 20, NOW, "r-2")
    assert outcome.header is None
    assert outcome.build is not None
    build_id = outcome.build["build_id"]
    assert outcome.build["status"] == "queued"
    assert queue.sent == [{"tenant": "demo", "build_id": build_id}]
    assert service.build_status("demo", build_id)["status"] == "queued"

    later = NOW + timedelta(minutes=3)
    done = service.run_build("demo", build_id, lambda: later)
    assert done["status"] == "succeeded"
    assert done["digest"] == expected["digest"]
    status = service.build_status("demo", build_id)
    assert status["trace"]["digest"] == expected["digest"]
    assert status["trace"]["truncated"] is True
    assert status["records_read"] == status["trace"]["sample_count"] <= 20
    stored = json.loads(documents.objects[document_key("demo", expected["digest"])])
    assert stored["build"]["built_at"] != expected["created_at"]
    assert {k: v for k, v in stored.items() if k != "build"} == {
        k: v for k, v in json.loads(sync._documents.objects[  # type: ignore[attr-defined]
            document_key("demo", expected["digest"])]).items() if k != "build"}
    # Delivered again, a finished build is left as it is.
    writes = len(builds.writes)
    assert service.run_build("demo", build_id, lambda: later)["status"] == "succeeded"
    assert len(builds.writes) == writes
    assert traces.get_header("demo", expected["digest"]) is not None


@pytest.mark.parametrize("deployment", ["never-captured", "coder"])
def test_a_large_build_of_an_empty_window_is_refused_before_anything_is_queued(
        service_parts, deployment):
    # max_requests above the synchronous limit: the probe that decides sync or async refuses.
    store, traces, documents, builds, queue, service = service_parts
    store.put_many([varied(i) for i in range(25)])
    until = NOW - timedelta(days=2) if deployment == "coder" else NOW
    with pytest.raises(NotFound) as raised:
        service.request_build("demo", deployment, "1h", until, 20, NOW, "r-3")
    assert raised.value.field == ("window" if deployment == "coder" else "deployment")
    assert (queue.sent, builds.writes, documents.objects, traces.headers) == ([], [], {}, {})


def test_a_queued_build_whose_window_emptied_fails_not_found_and_stores_nothing(service_parts):
    store, traces, documents, _, _, service = service_parts
    store.put_many([varied(i) for i in range(25)])
    build = service.request_build("demo", "coder", "1h", NOW, 20, NOW).build
    assert build is not None
    store.delete("demo", "coder")  # retention expired them while the build was queued
    done = service.run_build("demo", build["build_id"], lambda: NOW)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "not_found"
    assert (documents.objects, traces.headers) == ({}, {})


def test_another_tenant_cannot_see_a_build(service_parts):
    store, _, _, _, _, service = service_parts
    store.put_many([varied(i) for i in range(25)])
    build = service.request_build("demo", "coder", "1h", NOW, 20, NOW).build
    assert build is not None
    with pytest.raises(NotFound):
        service.build_status("other", build["build_id"])
    with pytest.raises(NotFound):
        service.build_status("demo", "../../etc")
