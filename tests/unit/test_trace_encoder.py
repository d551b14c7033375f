"""A window's records encoded while the store's read hands them over (`read_window`,
`RecordEncoder`, a batch at a time) give the document, bytes and digest of encoding them after
the read; an encoder that cannot vouch for its batches (out of order, past its limit) is not
used. The oracle is `rfc8785` over the document and the document of the plain path."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime

import pytest
import rfc8785

from infercrane.domain import trace_window
from infercrane.domain.trace import encode_trace
from infercrane.domain.trace_window import in_memory_trace, read_window
from infercrane.domain.windows import Window
from tests.fakes import BASE_MS, observation

WINDOW = Window(BASE_MS, BASE_MS + 86_400_000)
BUILT_AT = datetime(2026, 11, 29, tzinfo=UTC)


def _observations() -> list:
    # Ties at one arrival (ids in order), nullable fields null and not, a value the table does
    # not vouch for (ttft 1e-05, written with an exponent) in one batch only.
    return [observation(i, arrival_ms=BASE_MS + 100 * (i // 3), observation_id=f"o-{i:03d}",
                        ttft_ms=1e-5 if i == 20 else (None if i % 4 else 0.5 + i),
                        latency_ms=250.0 + i / 8, session_id=f"v1:{i % 3:064x}",
                        prefix_block_ids=(f"v1:{i % 5:064x}",) if i % 2 else None,
                        key_version="v1" if i % 7 else "v2")
            for i in range(30)]


def _build(found, encoder, max_requests=1000):
    return in_memory_trace(found, deployment="coder", window=WINDOW, max_requests=max_requests,
                           select="head", built_at=BUILT_AT, request_id=None, software="t",
                           encoder=encoder)


def _assert_reference(encoded) -> None:
    document = encoded.document
    assert b"".join(encoded.chunks()) == rfc8785.dumps(document)
    content = {k: v for k, v in document.items() if k not in ("digest", "build")}
    assert document["digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(content)).hexdigest()


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_records_encoded_while_read_are_the_document_encoded_after(monkeypatch, batch):
    monkeypatch.setattr(trace_window, "ENCODE_BATCH", batch)
    observations = _observations()
    found, encoder = read_window(iter(observations), WINDOW, 1000)
    assert found == observations and encoder.complete
    built = _build(found, encoder)
    assert built.document["records"] is encoder.records  # encoded while read, not again
    plain = encode_trace(deployment="coder", window=WINDOW, max_requests=1000,
                         observations=observations, truncated=False, built_at=BUILT_AT,
                         software="t")
    assert built.document == plain.document
    assert b"".join(built.records) == b"".join(plain.records)
    _assert_reference(built)


@pytest.mark.parametrize("batch", [1, 7])  # 1: only the order between batches tells
def test_a_read_out_of_order_is_encoded_again_in_order(monkeypatch, batch):
    monkeypatch.setattr(trace_window, "ENCODE_BATCH", batch)
    observations = _observations()
    shuffled = observations[10:] + observations[:10]  # a store that does not order its rows
    found, encoder = read_window(iter(shuffled), WINDOW, 1000)
    assert not encoder.complete and encoder.records == []
    built = _build(found, encoder)
    assert [r["offset_ms"] for r in built.document["records"]] == [
        o.arrival_ms - BASE_MS for o in observations]
    _assert_reference(built)
    # A tie at one arrival in the wrong id order is out of order too.
    swapped = [*observations[:3], observations[4], observations[3], *observations[5:]]
    assert not read_window(iter(swapped), WINDOW, 1000)[1].complete


def test_an_encoder_past_its_limit_gives_up_and_the_slice_is_encoded(monkeypatch):
    monkeypatch.setattr(trace_window, "ENCODE_BATCH", 7)
    observations = [replace(o, session_id=None) for o in _observations()]  # none to cut
    found, encoder = read_window(iter(observations), WINDOW, 12)
    assert len(found) == 30 and not encoder.complete and encoder.records == []
    built = _build(found, encoder, max_requests=12)
    assert built.document["sample_count"] == 12 and built.document["truncated"]
    _assert_reference(built)
