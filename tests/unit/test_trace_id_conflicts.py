"""A window whose store left out observations as id conflicts (an id sent twice with two
contents in different batches) says so in the trace, on the in-memory and the streamed path
alike; a window without any has no `id_conflicts` field, so its digest is what it always was."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from infercrane.domain.observation import StoredObservation
from infercrane.domain.trace_window import in_memory_trace, stream_window
from infercrane.domain.windows import Window

BASE_MS = 1_764_446_400_000
WINDOW = Window(BASE_MS, BASE_MS + 3_600_000)
NOW = datetime(2025, 11, 30, tzinfo=UTC)


def obs(n: int) -> StoredObservation:
    return StoredObservation(tenant="demo", deployment="coder", observation_id=f"o-{n}",
                             arrival_ms=BASE_MS + n * 1000, input_tokens=10 + n,
                             output_tokens=5, latency_ms=40.0, outcome="ok", streaming=False,
                             sampling_rate=1.0, source="captured", ingested_at_ms=BASE_MS)


@dataclass
class Counts:
    conflicts: int


class CountedRead(Iterator[StoredObservation]):
    """A read as the segment store returns it: an iterator with counts once exhausted."""

    def __init__(self, rows: list[StoredObservation], conflicts: int):
        self._rows = iter(rows)
        self._conflicts = conflicts
        self.counts = Counts(0)

    def __next__(self) -> StoredObservation:
        try:
            return next(self._rows)
        except StopIteration:
            self.counts = Counts(self._conflicts)
            raise


ROWS = [obs(n) for n in range(30)]


def streamed(conflicts: int, max_requests: int) -> tuple[str, dict]:
    def read(start_ms: int, limit: int | None, decided: object = None) -> Iterator[StoredObservation]:
        rows = [o for o in ROWS if o.arrival_ms >= start_ms][:limit]
        return CountedRead(rows, conflicts)

    done = stream_window(read, io.BytesIO(), deployment="coder", window=WINDOW,
                         max_requests=max_requests, select="head", progress=lambda n: None,
                         built_at=lambda: NOW, request_id=None, software=None)
    assert done is not None
    return done.digest, done.header


@pytest.mark.parametrize("max_requests", [100, 10], ids=["whole", "slice"])
def test_both_paths_report_conflicts_only_when_nonzero_and_agree(max_requests):
    for conflicts in (0, 2):
        document = in_memory_trace(ROWS, deployment="coder", window=WINDOW,
                                   max_requests=max_requests, select="head", built_at=NOW,
                                   request_id=None, software=None, conflicts=conflicts).document
        digest, header = streamed(conflicts, max_requests)
        assert digest == document["digest"]
        assert header.get("id_conflicts") == document.get("id_conflicts") == (conflicts or None)
    plain = in_memory_trace(ROWS, deployment="coder", window=WINDOW,
                            max_requests=max_requests, select="head", built_at=NOW,
                            request_id=None, software=None).document
    assert plain["digest"] == streamed(0, max_requests)[0]


def test_a_document_with_conflicts_matches_the_trace_schema():
    import jsonschema

    from infercrane.domain.trace import json_schema

    document = in_memory_trace(ROWS, deployment="coder", window=WINDOW, max_requests=100,
                               select="head", built_at=NOW, request_id=None, software=None,
                               conflicts=3).document
    jsonschema.validate(document, json_schema())
