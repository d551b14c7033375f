"""Replay traces: a versioned, canonical, digest-addressed document of observed traffic shapes.

A trace is built only from persisted observations. Building one sends no workload and creates no
infrastructure. The same observations, window and `max_requests` always give the same document
(minus its volatile `build` block) and therefore the same digest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.digest import canonical_bytes, compute_digest
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
    return {"evidence_class": "observed" if all(r["source"] == "captured" for r in records)
            else "imported",
            "timing_source": "modeled" if any(r["timing_source"] == "modeled" for r in records)
            else "observed"}


def _distinct_sorted(values: Sequence[Any]) -> list[Any]:
    unique = {canonical_bytes(v): v for v in values if v is not None}
    return [unique[k] for k in sorted(unique)]


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
    kept = sorted(observations, key=lambda o: (o.arrival_ms, o.observation_id))
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
            [_timing_model(raw) for raw in {o.timing_model for o in kept}]),
        "key_versions": sorted({o.key_version for o in kept if o.key_version}),
        "sampling_rates": sorted({float(o.sampling_rate) for o in kept}),
        "provenance": sorted({o.provenance for o in kept if o.provenance}),
        "records": records,
        "statistics": compute_statistics(records),
        "build": {"built_at": rfc3339(built_at), "request_id": request_id, "software": software},
    }
    document["digest"] = compute_digest(document)
    return document


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
