"""Importers for real traces: file bytes -> native observation items (then the one ingest path).

Formats:
  azure-csv       Azure LLM inference trace: `TIMESTAMP,ContextTokens,GeneratedTokens`
                  (UTC, 7-digit fraction). Absolute times.
  mooncake-jsonl  Mooncake / AIPerf `mooncake_trace`: `timestamp` (ms, relative), `input_length`,
                  `output_length`, `hash_ids` (prefix blocks of 512 tokens). Needs `start`.
  otlp-json       OTLP/JSON ExportTraceServiceRequest documents (one file or one per line).
  jsonl           native observation items, one per line.

Ids are derived from the file's SHA-256 and the line number (and the placement `start`), so a
re-import is a no-op and, arrivals being equal, file order breaks ties. `start` moves the file's
earliest arrival to that time and keeps every offset (at millisecond precision). Files without
latency get it from `ServiceTimeModel`, a deterministic model recorded with its parameters, and
are marked `timing_source: "modeled"`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.capture import MAX_LATENCY_MS, body_fields
from infercrane.domain.otlp import map_document
from infercrane.errors import InvalidInput

FORMATS = ("azure-csv", "mooncake-jsonl", "otlp-json", "jsonl")
MOONCAKE_BLOCK_TOKENS = 512
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ServiceTimeModel:
    """linear-v1: ttft = overhead + prefill x input tokens; latency = ttft + decode x output tokens.

    Defaults are a mid-size model on one modern GPU: 50 ms overhead, 0.1 ms per prompt token
    (10k tokens/s prefill), 20 ms per generated token (50 tokens/s decode). Values are rounded to
    the microsecond and capped at 24 h, so the same row always gives the same timing.
    """

    overhead_ms: float = 50.0
    prefill_ms_per_token: float = 0.1
    decode_ms_per_token: float = 20.0

    def __post_init__(self) -> None:
        for name in ("overhead_ms", "prefill_ms_per_token", "decode_ms_per_token"):
            value = getattr(self, name)
            if not 0 <= value <= 1e6:
                raise InvalidInput("Service-time model parameters are between 0 and 1e6.",
                                   field=name)

    def params(self) -> dict[str, float | str]:
        return {"name": "linear-v1", "overhead_ms": self.overhead_ms,
                "prefill_ms_per_token": self.prefill_ms_per_token,
                "decode_ms_per_token": self.decode_ms_per_token}

    def timing(self, input_tokens: int, output_tokens: int) -> tuple[float, float]:
        """(ttft_ms, latency_ms)."""
        ttft = min(MAX_LATENCY_MS, round(self.overhead_ms + self.prefill_ms_per_token * input_tokens, 3))
        latency = min(MAX_LATENCY_MS, round(ttft + self.decode_ms_per_token * output_tokens, 3))
        return ttft, latency


@dataclass
class ImportPlan:
    """What a file holds: items to post (file order) and the records that could not be read."""

    fmt: str
    digest: str
    records: int = 0  # data records seen (each gets an index)
    items: list[dict[str, Any]] = field(default_factory=list)
    index: list[int] = field(default_factory=list)  # record index of each item
    lines: list[int] = field(default_factory=list)  # 1-based file line of each item
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def provenance(self) -> str:
        return f"{self.fmt}:sha256:{self.digest}"

    def fail(self, line: int, field_name: str | None, code: str, message: str) -> None:
        self.errors.append({"index": self.records, "line": line, "field": field_name,
                            "code": code, "message": message})
        self.records += 1


def _ms(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(milliseconds=1)


def _iso(ms: int) -> str:
    return rfc3339(EPOCH + timedelta(milliseconds=ms))


def _azure_ticks(value: str) -> int:
    """'2023-11-16 18:17:03.9799600' (UTC) -> 100 ns ticks since the epoch, exactly."""
    whole, _, frac = value.strip().partition(".")
    seconds = (datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) - EPOCH)
    if frac and not frac.isdigit():
        raise ValueError("fraction")
    return int(seconds.total_seconds()) * 10_000_000 + int((frac or "0")[:7].ljust(7, "0"))


class _Builder:
    def __init__(self, plan: ImportPlan, deployment: str, start: datetime | None,
                 model: ServiceTimeModel, revision: str | None):
        self.plan, self.deployment, self.model, self.revision = plan, deployment, model, revision
        self.start_ms = None if start is None else _ms(start)
        placement = "file" if self.start_ms is None else str(self.start_ms)
        self.prefix = "imp-" + hashlib.sha256(f"{plan.digest}:{placement}".encode()).hexdigest()[:16]

    def add(self, line: int, arrival_ms: int, item: dict[str, Any], suffix: str = "") -> None:
        item.setdefault("observation_id", f"{self.prefix}-{line:08d}{suffix}")
        item["deployment"] = self.deployment
        if self.revision:
            item["revision"] = self.revision
        item["arrival"] = arrival_ms  # placed (shifted) in `finish`
        item["source"] = "imported"
        item["provenance"] = self.plan.provenance
        if "latency_ms" not in item:
            ttft, latency = self.model.timing(int(item.get("input_tokens") or 0),
                                              int(item.get("output_tokens") or 0))
            item["latency_ms"] = latency
            item.setdefault("ttft_ms", ttft)
            item["timing_source"] = "modeled"
            item["timing_model"] = self.model.params()
        self.plan.items.append(item)
        self.plan.index.append(self.plan.records)
        self.plan.lines.append(line)
        self.plan.records += 1

    def finish(self, relative: bool) -> ImportPlan:
        arrivals = [i["arrival"] for i in self.plan.items]
        if relative and self.start_ms is None and arrivals:
            raise InvalidInput("This format has relative timestamps: pass a start time.",
                               field="start")
        shift = 0
        if self.start_ms is not None and arrivals:
            shift = self.start_ms - min(arrivals)
        for item in self.plan.items:
            item["arrival"] = _iso(item["arrival"] + shift)
        return self.plan


def _lines(text: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _azure(text: str, b: _Builder) -> ImportPlan:
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    if header is None or any(h not in header for h in need):
        raise InvalidInput("An azure-csv file starts with TIMESTAMP,ContextTokens,GeneratedTokens.",
                           field="file")
    col = {h: header.index(h) for h in need}
    ticks: list[int] = []
    for line, row in enumerate(rows, 2):
        if not row:
            continue
        try:
            t = _azure_ticks(row[col["TIMESTAMP"]])
            inp, out = int(row[col["ContextTokens"]]), int(row[col["GeneratedTokens"]])
        except (ValueError, IndexError):
            b.plan.fail(line, None, "unreadable_record", "This line is not a valid azure-csv row.")
            continue
        ticks.append(t)
        b.add(line, 0, {"input_tokens": inp, "output_tokens": out})
    # Unshifted, each time is truncated to the millisecond on its own. Shifted, offsets are
    # taken in 100 ns ticks and truncated once, so every offset survives the move exactly.
    first = min(ticks) if ticks else 0
    for item, t in zip(b.plan.items, ticks, strict=True):
        ms = t // 10_000 if b.start_ms is None else b.start_ms + (t - first) // 10_000
        item["arrival"] = _iso(ms)
    return b.plan


def _mooncake(text: str, b: _Builder) -> ImportPlan:
    for line, raw in _lines(text):
        try:
            row = json.loads(raw)
            ts, inp, out = row["timestamp"], int(row["input_length"]), int(row["output_length"])
            if isinstance(ts, bool) or not isinstance(ts, int | float):
                raise ValueError("timestamp")
            blocks = row.get("hash_ids")
            if blocks is not None and not isinstance(blocks, list):
                raise ValueError("hash_ids")
        except (ValueError, KeyError, TypeError):
            b.plan.fail(line, None, "unreadable_record", "This line is not a valid mooncake record.")
            continue
        item: dict[str, Any] = {"input_tokens": inp, "output_tokens": out}
        if blocks:
            item["prefix_block_ids"] = blocks
            item["prefix_block_size"] = MOONCAKE_BLOCK_TOKENS
        b.add(line, int(ts), item)
    return b.finish(relative=True)


def _otlp(text: str, b: _Builder) -> ImportPlan:
    stripped = text.strip()
    try:
        documents = [(1, json.loads(stripped))]
    except ValueError:
        documents = []
        for line, raw in _lines(text):
            try:
                documents.append((line, json.loads(raw)))
            except ValueError:
                b.plan.fail(line, None, "unreadable_record", "This line is not valid JSON.")
    for line, doc in documents:
        try:
            mapping = map_document(doc)
        except InvalidInput:
            b.plan.fail(line, None, "unreadable_record", "This line is not an OTLP trace export.")
            continue
        for n, item in enumerate(mapping.items):
            item.pop("observation_id", None)
            item.pop("deployment", None)
            item.pop("revision", None)
            arrival = item.pop("arrival", None)
            b.add(line, _ms(arrival) if arrival is not None else 0, item, suffix=f"-{n:05d}")
    return b.finish(relative=False)


def _jsonl(text: str, b: _Builder) -> ImportPlan:
    from infercrane.domain.capture import parse_time

    for line, raw in _lines(text):
        try:
            item = json.loads(raw)
            if not isinstance(item, dict):
                raise ValueError("object")
            arrival_ms = _ms(parse_time(item.pop("arrival"), "arrival"))
        except (ValueError, KeyError, InvalidInput, TypeError):
            b.plan.fail(line, None, "unreadable_record",
                        "This line is not an observation object with an RFC 3339 arrival.")
            continue
        refused = body_fields(item)
        if refused:
            # Refused here as well as by the service: a body in the file never leaves the machine.
            b.plan.fail(line, refused[0], "body_field_refused",
                        "Prompt and output bodies are never accepted; remove this field.")
            continue
        item.pop("source", None)
        item.pop("provenance", None)
        b.add(line, arrival_ms, item)
    return b.finish(relative=False)


READERS: dict[str, Callable[[str, _Builder], ImportPlan]] = {
    "azure-csv": _azure, "mooncake-jsonl": _mooncake, "otlp-json": _otlp, "jsonl": _jsonl,
}


def read(data: bytes, fmt: str, deployment: str, *, start: datetime | None = None,
         model: ServiceTimeModel | None = None, revision: str | None = None) -> ImportPlan:
    """Everything in `data` as native items, ready for the ingest path."""
    if fmt not in READERS:
        raise InvalidInput("Unknown import format.", field="format")
    if start is not None and start.tzinfo is None:
        raise InvalidInput("The start time needs a timezone (use Z for UTC).", field="start")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput("The file is not UTF-8 text.", field="file") from exc
    plan = ImportPlan(fmt=fmt, digest=hashlib.sha256(data).hexdigest())
    return READERS[fmt](text, _Builder(plan, deployment, start, model or ServiceTimeModel(), revision))
