"""Replay traces: a versioned, canonical, digest-addressed document of observed traffic shapes.

A trace is built only from persisted observations. Building one sends no workload and creates no
infrastructure. The same observations, window and `max_requests` always give the same document
(minus its volatile `build` block) and therefore the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter, lt
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.attestation import block_digests
from infercrane.domain.digest import canonical_around, canonical_bytes, spliced_digest
from infercrane.domain.observation import StoredObservation
from infercrane.domain.stats import compute_statistics
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


def _number(value: float | int | None) -> float | None:
    # Stores may hand back Decimals or ints; the document holds plain JSON numbers.
    return None if value is None else float(value)


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
        "cached_input_tokens": None if obs.cached_input_tokens is None
        else int(obs.cached_input_tokens),
        "ttft_ms": _number(obs.ttft_ms),
        "latency_ms": _number(obs.latency_ms),
        "outcome": obs.outcome,
        "streaming": bool(obs.streaming),
        "sampling_rate": float(obs.sampling_rate),
        "source": obs.source,
        "timing_source": obs.timing_source,
        "revision": obs.revision,
        "session_id": obs.session_id,
        "parent_session_id": obs.parent_session_id,
        "shared_prefix_id": obs.shared_prefix_id,
        "prefix_block_ids": None if obs.prefix_block_ids is None else list(obs.prefix_block_ids),
        "prefix_block_size": obs.prefix_block_size,
    }


def evidence_labels(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What the records support: `observed` evidence only when every record was captured in
    production; `modeled` timing as soon as any record's timing came from a model."""
    sources = set(map(itemgetter("source"), records))
    timing = set(map(itemgetter("timing_source"), records))
    return {"evidence_class": "observed" if sources <= {"captured"} else "imported",
            "timing_source": "modeled" if "modeled" in timing else "observed"}


def _distinct_sorted(values: Sequence[Any]) -> list[Any]:
    unique = {canonical_bytes(v): v for v in values if v is not None}
    return [unique[k] for k in sorted(unique)]


@dataclass(frozen=True)
class EncodedTrace:
    """A trace document with its records' canonical bytes, encoded once for the digest and
    reused to store the document (`chunks`: its canonical bytes) and to sign its blocks."""

    document: dict[str, Any]
    records: bytes  # canonical_bytes(document["records"])

    def chunks(self) -> list[bytes]:
        head, tail = canonical_around(self.document, "records")
        return [head, self.records, tail]

    def blocks(self) -> dict[str, str]:
        """`attestation.block_digests(document)`, the records' from the bytes already made."""
        blocks = block_digests({k: v for k, v in self.document.items() if k != "records"})
        blocks["records"] = hashlib.sha256(self.records).hexdigest()
        return blocks


def _in_order(observations: Sequence[StoredObservation]) -> bool:
    """Strictly increasing arrivals are (arrival, id) order whatever the ids: the store's reads
    come so, and checking costs a fraction of sorting them again."""
    arrivals = list(map(attrgetter("arrival_ms"), observations))
    return all(map(lt, arrivals, arrivals[1:]))


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
                 id_conflicts: int = 0) -> EncodedTrace:
    """`build_trace`'s document with its records' canonical bytes."""
    kept = (observations if _in_order(observations)
            else sorted(observations, key=lambda o: (o.arrival_ms, o.observation_id)))
    records = [trace_record(o, window.start_ms) for o in kept]
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "deployment": deployment,
        "window": {"start": rfc3339(from_epoch_ms(window.start_ms)),
                   "end": rfc3339(from_epoch_ms(window.end_ms)),
                   "duration_ms": window.duration_ms},
        "max_requests": max_requests,
        "sample_count": len(records),
        "truncated": truncated,
        **({} if selection is None else {"selection": dict(selection)}),
        **({"id_conflicts": id_conflicts} if id_conflicts else {}),
        **evidence_labels(records),
        "timing_models": _distinct_sorted(
            [_timing_model(raw) for raw in set(map(attrgetter("timing_model"), kept))]),
        "key_versions": sorted(set(map(attrgetter("key_version"), kept)) - {None, ""}),
        "sampling_rates": sorted(set(map(float, map(attrgetter("sampling_rate"), kept)))),
        "provenance": sorted(set(map(attrgetter("provenance"), kept)) - {None, ""}),
        "records": records,
        "statistics": compute_statistics(records),
        "build": {"built_at": rfc3339(built_at), "request_id": request_id, "software": software},
    }
    encoded = canonical_bytes(records)
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
