"""Replay traces: a versioned, canonical, digest-addressed document of observed traffic shapes.

A trace is built only from persisted observations. Building one sends no workload and creates no
infrastructure. The same observations, window and `max_requests` always give the same document
(minus its volatile `build` block) and therefore the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter, le, lt
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.attestation import block_digests
from infercrane.domain.digest import (
    canonical_around,
    canonical_bytes,
    spliced_digest,
    table_bytes,
)
from infercrane.domain.observation import StoredObservation
from infercrane.domain.stats import StatisticsAccumulator
from infercrane.domain.windows import Window, from_epoch_ms

SCHEMA = "infercrane.replay.trace/v1"
HISTOGRAM_BINS = 24
# The fields of the trace header: what `replay --output json` and GET /v1/traces/{digest} show.
HEADER_FIELDS = ("schema", "deployment", "window", "max_requests", "sample_count", "truncated",
                 "selection", "id_conflicts", "evidence_class", "timing_source", "digest",
                 "statistics")


def header_fields(document: Mapping[str, Any]) -> dict[str, Any]:
    # `selection` is present only in a trace whose window held more than max_requests,
    # `id_conflicts` only when the store found ids naming two contents in the window.
    return {name: document[name] for name in HEADER_FIELDS if name in document}


def _timing_model(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # kept verbatim rather than dropped: it is evidence of how timing was modelled


def trace_record(obs: StoredObservation, window_start_ms: int) -> dict[str, Any]:
    return {
        "offset_ms": obs.arrival_ms - window_start_ms,
        "input_tokens": int(obs.input_tokens),
        "output_tokens": int(obs.output_tokens),
        "cached_input_tokens": None if (cached := obs.cached_input_tokens) is None
        else int(cached),
        # Stores may hand back Decimals or ints; the document holds plain JSON numbers.
        "ttft_ms": None if (ttft := obs.ttft_ms) is None else float(ttft),
        "latency_ms": None if (latency := obs.latency_ms) is None else float(latency),
        "outcome": obs.outcome,
        "streaming": bool(obs.streaming),
        "sampling_rate": float(obs.sampling_rate),
        "source": obs.source,
        "timing_source": obs.timing_source,
        "revision": obs.revision,
        "session_id": obs.session_id,
        "parent_session_id": obs.parent_session_id,
        "shared_prefix_id": obs.shared_prefix_id,
        "prefix_block_ids": None if (blocks := obs.prefix_block_ids) is None else list(blocks),
        "prefix_block_size": obs.prefix_block_size,
    }


# The fields of every record `trace_record` makes (a unit test holds the two together).
RECORD_FIELDS = ("offset_ms", "input_tokens", "output_tokens", "cached_input_tokens", "ttft_ms",
                 "latency_ms", "outcome", "streaming", "sampling_rate", "source", "timing_source",
                 "revision", "session_id", "parent_session_id", "shared_prefix_id",
                 "prefix_block_ids", "prefix_block_size")


_ROW = itemgetter(*RECORD_FIELDS)
_DISTINCT = tuple(map(attrgetter, ("timing_model", "key_version", "sampling_rate", "provenance")))


def _records(observations: Sequence[StoredObservation], window_start_ms: int) -> tuple[
        list[dict[str, Any]], dict[str, list[Any]], tuple[set[Any], ...]]:
    """The records of `observations` (a batch: `RecordEncoder`), each field of them as a column
    (for the statistics and the canonical bytes), and the distinct timing models, key versions,
    sampling rates and provenances: one Python step a record (the record), the rest C-level
    passes over a batch still in the processor's cache (a step a record for each was a third
    more)."""
    records = [trace_record(obs, window_start_ms) for obs in observations]
    if records and len(records[0]) != len(RECORD_FIELDS):  # pragma: no cover - tested together
        raise RuntimeError("trace_record and RECORD_FIELDS disagree")
    rows = zip(*map(_ROW, records), strict=True)  # every row as long: one field a column
    columns = dict(zip(RECORD_FIELDS, map(list, rows), strict=True)) if records else {
        name: [] for name in RECORD_FIELDS}
    return records, columns, tuple(set(map(get, observations)) for get in _DISTINCT)


def evidence_labels(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What the records support: `observed` evidence only when every record was captured in
    production; `modeled` timing as soon as any record's timing came from a model."""
    return _labels(list(map(itemgetter("source"), records)),
                   list(map(itemgetter("timing_source"), records)))


def _labels(sources: Collection[Any], timing_sources: Collection[Any]) -> dict[str, str]:
    return {"evidence_class": "observed" if set(sources) <= {"captured"} else "imported",
            "timing_source": "modeled" if "modeled" in timing_sources else "observed"}


def _distinct_sorted(values: Sequence[Any]) -> list[Any]:
    unique = {canonical_bytes(v): v for v in values if v is not None}
    return [unique[k] for k in sorted(unique)]


@dataclass(frozen=True)
class EncodedTrace:
    """A trace document with its records' canonical bytes, encoded once for the digest and
    reused to store the document (`chunks`: its canonical bytes) and to sign its blocks."""

    document: dict[str, Any]
    records: list[bytes]  # canonical_bytes(document["records"]), in chunks

    def chunks(self) -> list[bytes]:
        head, tail = canonical_around(self.document, "records")
        return [head, *self.records, tail]

    def blocks(self) -> dict[str, str]:
        """`attestation.block_digests(document)`, the records' from the bytes already made."""
        blocks = block_digests({k: v for k, v in self.document.items() if k != "records"})
        records = hashlib.sha256()
        for chunk in self.records:
            records.update(chunk)
        blocks["records"] = records.hexdigest()
        return blocks


_arrival = attrgetter("arrival_ms")
_oid = attrgetter("observation_id")
# Records are made and encoded this many at a time (`RecordEncoder`): one canonical encoding of
# a list of records (`digest.table_bytes`, column by column) costs a fraction of one a record,
# and a batch's objects are still in the processor's cache for every step over them.
ENCODE_BATCH = 1_000


def _increasing(values: list[int]) -> bool:
    return all(map(lt, values, values[1:]))


def in_trace_order(observations: Sequence[StoredObservation]) -> bool:
    """Whether `observations` are in (arrival, id) order (ties allowed): sorting them would
    leave them as they are. Strictly increasing arrivals are, whatever the ids: checking costs a
    fraction of comparing pairs, which only arrivals that tie need."""
    arrivals = list(map(_arrival, observations))
    if _increasing(arrivals):
        return True
    pairs = list(zip(arrivals, map(_oid, observations), strict=True))
    return all(map(le, pairs, pairs[1:]))


class RecordEncoder:
    """A trace's records, made and encoded a batch at a time as observations come (`extend`,
    in (arrival, id) order): each batch's records, their canonical bytes, statistics, evidence
    labels and distinct values, while the batch's objects are still in the processor's cache.
    Made in one pass after a 100,000-row read, each step went back over 100,000 cold objects.
    `trace_window.read_window` feeds one as the store's read hands rows over; `encode_trace`
    feeds one with what it is given. It gives up (`complete` False, its records dropped) past
    `limit` observations or when they do not come in (arrival, id) order: the caller then
    chooses or sorts, and encodes what it keeps. With `keep=False` (a streamed build) it keeps
    no record: the caller `take`s each batch's bytes as they are made."""

    def __init__(self, window_start_ms: int, limit: int | None = None, *, keep: bool = True):
        self._start = window_start_ms
        self._limit = limit
        self._keep = keep
        self._last: tuple[int, str] | None = None
        self.count = 0  # observations given, kept or not
        self.complete = True
        self.records: list[dict[str, Any]] = []
        # The records array's canonical bytes between its brackets: each batch's records, after
        # a comma past the first (RFC 8785 writes an array exactly so).
        self._encoded: list[bytes] = []
        self.statistics = StatisticsAccumulator()
        self.sources: set[Any] = set()
        self.timing_sources: set[Any] = set()
        # Distinct timing models, key versions, sampling rates, provenances (`_records`).
        self.distinct: tuple[set[Any], ...] = (set(), set(), set(), set())

    def extend(self, batch: Sequence[StoredObservation]) -> None:
        if not self.complete or not batch:
            return
        self.count += len(batch)
        boundary = (batch[0].arrival_ms, batch[0].observation_id)
        if (self._limit is not None and self.count > self._limit) or (
                self._last is not None and boundary < self._last) or not in_trace_order(batch):
            self.complete = False
            self.records, self._encoded = [], []
            return
        self._last = (batch[-1].arrival_ms, batch[-1].observation_id)
        records, columns, distinct = _records(batch, self._start)
        chunks = table_bytes(columns, len(records))
        if chunks is None:  # a value the table does not vouch for: the reference decides
            chunks = [canonical_bytes(records)]
        # The batch's own array without its brackets.
        if len(chunks) == 1:
            chunks = [chunks[0][1:-1]]
        else:
            chunks = [chunks[0][1:], *chunks[1:-1], chunks[-1][:-1]]
            if not chunks[-1]:  # `]` alone, as digest.table_bytes ends
                chunks.pop()
        if self.count > len(records):  # a batch before this one
            chunks[0] = b"," + chunks[0]
        self._encoded += chunks
        if self._keep:
            self.records += records
        self.statistics.extend_columns(columns)
        self.sources.update(columns["source"])
        self.timing_sources.update(columns["timing_source"])
        for mine, found in zip(self.distinct, distinct, strict=True):
            mine.update(found)

    def encoded(self) -> list[bytes]:
        """`canonical_bytes(self.records)`, in chunks."""
        return [b"[", *self._encoded, b"]"]

    def take(self) -> list[bytes]:
        """The records' canonical bytes between the array's brackets made since the last `take`
        (a streamed build spools them)."""
        taken, self._encoded = self._encoded, []
        return taken

    def labels(self) -> dict[str, Any]:
        """The document's fields that label every record encoded: evidence class, timing
        source, distinct timing models, key versions, sampling rates and provenances."""
        timing_models, key_versions, sampling_rates, provenance = self.distinct
        return {
            **_labels(self.sources, self.timing_sources),
            "timing_models": _distinct_sorted([_timing_model(raw) for raw in timing_models]),
            "key_versions": sorted(key_versions - {None, ""}),
            "sampling_rates": sorted(set(map(float, sampling_rates))),
            "provenance": sorted(provenance - {None, ""}),
        }


def build_trace(*, deployment: str, window: Window, max_requests: int,
                observations: Sequence[StoredObservation], truncated: bool, built_at: datetime,
                request_id: str | None = None, software: str | None = None,
                selection: Mapping[str, Any] | None = None,
                id_conflicts: int = 0) -> dict[str, Any]:
    """The trace document of `observations`: the window's, or the slice `selection` describes
    (`domain/trace_select.py`) when it held more than `max_requests`. Without a selection the
    document has no `selection` field, so its digest is what it always was; likewise
    `id_conflicts` (observations the store left out because their id already named other
    content, docs/capture.md, Storage) is there only when nonzero."""
    return encode_trace(deployment=deployment, window=window, max_requests=max_requests,
                        observations=observations, truncated=truncated, built_at=built_at,
                        request_id=request_id, software=software, selection=selection,
                        id_conflicts=id_conflicts).document


def encode_trace(*, deployment: str, window: Window, max_requests: int,
                 observations: Sequence[StoredObservation], truncated: bool, built_at: datetime,
                 request_id: str | None = None, software: str | None = None,
                 selection: Mapping[str, Any] | None = None,
                 id_conflicts: int = 0, encoder: RecordEncoder | None = None) -> EncodedTrace:
    """`build_trace`'s document with its records' canonical bytes. `encoder`: `observations`
    encoded already as they were read (used when it holds them all, in order)."""
    if encoder is None or not encoder.complete or encoder.count != len(observations):
        kept = observations
        if not in_trace_order(observations):
            kept = sorted(observations, key=lambda o: (o.arrival_ms, o.observation_id))
        encoder = RecordEncoder(window.start_ms)
        for start in range(0, len(kept), ENCODE_BATCH):
            encoder.extend(kept[start:start + ENCODE_BATCH])
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "deployment": deployment,
        "window": {"start": rfc3339(from_epoch_ms(window.start_ms)),
                   "end": rfc3339(from_epoch_ms(window.end_ms)),
                   "duration_ms": window.duration_ms},
        "max_requests": max_requests,
        "sample_count": len(encoder.records),
        "truncated": truncated,
        **({} if selection is None else {"selection": dict(selection)}),
        **({"id_conflicts": id_conflicts} if id_conflicts else {}),
        **encoder.labels(),
        "records": encoder.records,
        "statistics": encoder.statistics.result(),
        "build": {"built_at": rfc3339(built_at), "request_id": request_id, "software": software},
    }
    encoded = encoder.encoded()
    document["digest"] = spliced_digest(document, "records", encoded)
    return EncodedTrace(document, encoded)


def arrival_bin(offset_ms: int, duration_ms: int, bins: int = HISTOGRAM_BINS) -> int:
    return min(bins - 1, int(offset_ms) * bins // duration_ms) if duration_ms > 0 else 0


def arrival_histogram(document: Mapping[str, Any], bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    duration = int(document["window"]["duration_ms"])
    counts = [0] * bins
    for record in document["records"]:
        counts[arrival_bin(record["offset_ms"], duration, bins)] += 1
    return {"bins": bins, "bin_ms": duration / bins, "counts": counts}


def trace_header(document: Mapping[str, Any], *, size_bytes: int) -> dict[str, Any]:
    """The small summary stored in the table and returned by the API (never the records)."""
    header = header_fields(document)
    header["created_at"] = document["build"]["built_at"]
    header["document"] = {"path": f"/v1/traces/{document['digest']}/document",
                          "size_bytes": size_bytes}
    header["arrival_histogram"] = arrival_histogram(document)
    return header


def json_schema() -> dict[str, Any]:
    """The trace's JSON Schema (package data `infercrane/schemas/trace.v1.json`)."""
    from importlib.resources import files

    schema: dict[str, Any] = json.loads(
        files("infercrane").joinpath("schemas/trace.v1.json").read_text(encoding="utf-8"))
    return schema
