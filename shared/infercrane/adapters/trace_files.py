"""Public trace file formats -> `Row`s, streamed (a file is never held in memory whole).

Formats (see docs/capture.md for the specs each follows):
  azure-csv       Azure LLM inference traces: `TIMESTAMP,ContextTokens,GeneratedTokens`. Times are
                  UTC, 2023 form `2023-11-16 18:15:46.6805900` (7-digit fraction, no offset) or
                  2024 form `2024-05-10 00:00:00.009930+00:00` (6 digits and an offset).
  mooncake-jsonl  Mooncake / AIPerf `mooncake_trace`: `timestamp` (ms since the first request) or
                  `delay` (ms after the session's previous turn), `input_length`,
                  `output_length`, `hash_ids` (blocks of `--block-size` tokens), `session_id`.
                  A continuing turn's `input_length` and `hash_ids` are its NEW tokens only (AIPerf
                  sends the session's history with it), so the stored input adds the previous
                  turn's input and output, and its blocks extend the previous turn's.
                  `text_input`, `messages`, `payload`, `tools` and `extra` are never read: they
                  are dropped and counted.
  otlp-json       OTLP/JSON ExportTraceServiceRequest documents, one per line (or one file).
  jsonl           native observation items, one per line.

A first line that is not a record (a CSV header, a column list) is a header, not a rejection.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from infercrane.domain.capture import body_fields, parse_time
from infercrane.domain.importers import NS_PER_MS, ImportOptions, Row, RowError, ns_of
from infercrane.domain.otlp import map_document
from infercrane.errors import InvalidInput

FORMATS = ("azure-csv", "mooncake-jsonl", "otlp-json", "jsonl")
RELATIVE_FORMATS = frozenset({"mooncake-jsonl"})
# Units a mooncake timestamp may be given in (ns per unit). The spec says milliseconds.
TIMESTAMP_UNITS = {"s": 1_000_000_000, "ms": NS_PER_MS, "us": 1_000}
# Mooncake/AIPerf fields that hold (or describe) content: never read, only counted.
MOONCAKE_CONTENT_FIELDS = ("text_input", "messages", "payload", "tools", "extra")
MOONCAKE_FIELDS = frozenset({"timestamp", "delay", "session_id", "input_length",
                             "output_length", "hash_ids", "type", *MOONCAKE_CONTENT_FIELDS})
# Epoch-like values (>= 1e9) cannot be told apart as s, ms or us.
EPOCH_LIKE = Decimal(1_000_000_000)

_AZURE_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?$")
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass
class ReadStats:
    """What a pass over a file saw besides its rows."""

    header_lines: int = 0
    dropped_fields: Counter[str] = field(default_factory=Counter)
    ignored_fields: Counter[str] = field(default_factory=Counter)
    timestamps: int = 0  # mooncake rows with a `timestamp` (raw file units below)
    min_timestamp: Decimal | None = None
    max_timestamp: Decimal | None = None

    def saw_timestamp(self, value: Decimal) -> None:
        self.timestamps += 1
        if self.min_timestamp is None or value < self.min_timestamp:
            self.min_timestamp = value
        if self.max_timestamp is None or value > self.max_timestamp:
            self.max_timestamp = value


def ambiguous_unit(stats: ReadStats) -> str | None:
    """Why the file's mooncake timestamps cannot be taken as milliseconds without being told, or
    None. Two signs: epoch-like values (s, ms and us all plausible), and a mean spacing under
    1 ms (over 1,000 requests/s all through the file: what seconds read as ms look like)."""
    if stats.min_timestamp is None or stats.max_timestamp is None:
        return None
    if stats.min_timestamp >= EPOCH_LIKE:
        return "The timestamps look like epoch times, whose unit cannot be told"
    span = stats.max_timestamp - stats.min_timestamp
    if stats.timestamps >= 2 and span > 0 and span / (stats.timestamps - 1) < 1:
        return "The timestamps are under 1 ms apart on average, as seconds read as ms would be"
    return None


def azure_time_ns(value: str) -> int:
    """'2023-11-16 18:17:03.9799600' or '2024-05-10 00:00:00.009930+00:00' -> ns since the epoch,
    exactly (no float on the way). No offset means UTC, as in the published traces."""
    m = _AZURE_TIME.match(value.strip())
    if m is None:
        raise ValueError("TIMESTAMP")
    day, clock, frac, zone = m.groups()
    seconds = _whole_seconds(day, clock)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


@lru_cache(maxsize=4096)
def _whole_seconds(day: str, clock: str) -> int:
    # Rows share their second with their neighbours: parsing each second once is most of the
    # reader's speed (strptime was 60% of an import's CPU).
    y, mo, d = (int(p) for p in day.split("-"))
    h, mi, sec = (int(p) for p in clock.split(":"))
    return ns_of(datetime(y, mo, d, h, mi, sec, tzinfo=UTC)) // 1_000_000_000


def _text(stream: IO[bytes]) -> io.TextIOWrapper:
    return io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")


def _looks_like_header(raw: str) -> bool:
    # A column list: names separated by commas/tabs, no JSON object, no record.
    return not raw.lstrip().startswith("{") and bool(re.match(r"^[A-Za-z_# ][\w ,\t#.-]*$", raw))


def _azure(stream: IO[bytes], options: ImportOptions, stats: ReadStats) -> Iterator[Row | RowError]:
    rows = csv.reader(_text(stream))
    header = next(rows, None)
    if header is None or any(h not in [c.strip() for c in header] for h in _AZURE_COLUMNS):
        raise InvalidInput("An azure-csv file starts with TIMESTAMP,ContextTokens,GeneratedTokens.",
                           field="file")
    names = [c.strip() for c in header]
    stats.header_lines += 1
    col = {h: names.index(h) for h in _AZURE_COLUMNS}
    for line, row in enumerate(rows, 2):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if row[0].strip() == names[0] and [c.strip() for c in row] == names:
            stats.header_lines += 1  # files joined with their headers
            continue
        try:
            at = azure_time_ns(row[col["TIMESTAMP"]])
        except (ValueError, IndexError):
            yield RowError(line, "TIMESTAMP", "invalid_format",
                           "TIMESTAMP is not YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM] (UTC).")
            continue
        try:
            inp, out = int(row[col["ContextTokens"]]), int(row[col["GeneratedTokens"]])
        except (ValueError, IndexError):
            yield RowError(line, "ContextTokens", "invalid_type",
                           "ContextTokens and GeneratedTokens are whole numbers.")
            continue
        yield Row(line, at, {"input_tokens": inp, "output_tokens": out})


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(_text(stream), 1):
        if line.strip():
            yield n, line


def _number(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("number")
    number = Decimal(str(value))
    if not number.is_finite() or number < 0:
        raise ValueError("number")
    return number


@dataclass
class _Turn:
    arrival_ns: int
    input_tokens: int
    output_tokens: int
    blocks: list[Any]


def _mooncake(stream: IO[bytes], options: ImportOptions,
              stats: ReadStats) -> Iterator[Row | RowError]:
    unit = TIMESTAMP_UNITS[options.timestamp_unit or "ms"]
    sessions: dict[str, _Turn] = {}
    first = True
    for line, raw in _lines(stream):
        try:
            row = json.loads(raw)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            if first and _looks_like_header(raw):
                stats.header_lines += 1
                first = False
                continue
            first = False
            yield RowError(line, None, "unreadable_record", "This line is not a JSON object.")
            continue
        first = False
        for name in row:
            if name in MOONCAKE_CONTENT_FIELDS:
                stats.dropped_fields[name] += 1
            elif name not in MOONCAKE_FIELDS:
                stats.ignored_fields[str(name)[:64]] += 1
        try:
            yielded = _mooncake_row(line, row, unit, options, sessions, stats)
        except _Bad as bad:
            yield RowError(line, bad.field, bad.code, bad.message)
            continue
        yield yielded


class _Bad(Exception):
    def __init__(self, field_name: str | None, code: str, message: str):
        super().__init__(message)
        self.field, self.code, self.message = field_name, code, message


def _whole(row: dict[str, Any], name: str) -> int:
    value = row.get(name)
    if value is None:
        if name == "input_length" and any(f in row for f in MOONCAKE_CONTENT_FIELDS):
            raise _Bad(name, "missing", "A row with text but no input_length has no known "
                       "length; its text is never read.")
        raise _Bad(name, "missing", f"{name} is required.")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(name, "invalid_type", f"{name} is a whole number of tokens.")
    return value


def _mooncake_row(line: int, row: dict[str, Any], unit: int, options: ImportOptions,
                  sessions: dict[str, _Turn], stats: ReadStats) -> Row:
    new_input, output = _whole(row, "input_length"), _whole(row, "output_length")
    blocks = row.get("hash_ids")
    if blocks is not None and (not isinstance(blocks, list) or any(
            isinstance(b, bool) or not isinstance(b, int | str) for b in blocks)):
        raise _Bad("hash_ids", "invalid_type", "hash_ids is a list of integers.")
    session = row.get("session_id")
    if session is not None and (isinstance(session, bool) or not isinstance(session, str | int)):
        raise _Bad("session_id", "invalid_type", "session_id is a string.")
    key = None if session is None else str(session)
    previous = sessions.get(key) if key is not None else None
    timestamp, delay = row.get("timestamp"), row.get("delay")
    if timestamp is not None and delay is not None:
        raise _Bad("delay", "invalid_format", "A row has a timestamp or a delay, not both.")
    try:
        ts = None if timestamp is None else _number(timestamp)
        wait = None if delay is None else _number(delay)
    except ValueError:
        raise _Bad("timestamp" if timestamp is not None else "delay", "invalid_type",
                   "timestamp and delay are non-negative numbers.") from None
    input_tokens, full_blocks = new_input, list(blocks or [])
    if previous is not None:
        input_tokens = new_input + previous.input_tokens + previous.output_tokens
        full_blocks = previous.blocks + full_blocks
    if ts is not None:
        stats.saw_timestamp(ts)
        arrival = int(ts * unit)
    elif previous is not None:
        # AIPerf waits `delay` after the previous turn's response: its (modelled) latency.
        _, latency = options.model.timing(previous.input_tokens, previous.output_tokens)
        arrival = previous.arrival_ns + int(Decimal(str(latency)) * NS_PER_MS) + int(
            (wait or 0) * unit)
    elif wait is not None:
        arrival = int(wait * unit)
    else:
        raise _Bad("timestamp", "missing", "A row needs a timestamp, or a delay after an "
                   "earlier turn of its session.")
    if key is not None:
        sessions[key] = _Turn(arrival, input_tokens, output, full_blocks)
    fields: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output}
    if key is not None:
        fields["session_id"] = key  # a raw id: the service HMACs it with the tenant's key
    if full_blocks:
        fields["prefix_block_ids"] = full_blocks
        fields["prefix_block_size"] = options.block_size
    return Row(line, arrival, fields)


def _otlp(stream: IO[bytes], options: ImportOptions,
          stats: ReadStats) -> Iterator[Row | RowError]:
    text = _text(stream)
    head = text.readline()
    documents: Iterator[tuple[int, Any]]
    try:
        one = json.loads(head) if head.strip() else None
    except ValueError:
        one = None
    if one is None and head.strip():
        # A pretty-printed single document: read whole (OTLP exports one per line stream).
        try:
            documents = iter([(1, json.loads(head + text.read()))])
        except ValueError:
            yield RowError(1, None, "unreadable_record", "This line is not valid JSON.")
            return
    else:
        def per_line() -> Iterator[tuple[int, Any]]:
            if one is not None:
                yield 1, one
            for n, raw in enumerate(text, 2):
                if raw.strip():
                    try:
                        yield n, json.loads(raw)
                    except ValueError:
                        yield n, None
        documents = per_line()
    for line, doc in documents:
        if doc is None:
            yield RowError(line, None, "unreadable_record", "This line is not valid JSON.")
            continue
        try:
            mapping = map_document(doc)
        except InvalidInput:
            yield RowError(line, None, "unreadable_record", "This line is not an OTLP trace export.")
            continue
        for n, item in enumerate(mapping.items):
            for name in ("observation_id", "deployment", "revision"):
                item.pop(name, None)
            arrival = item.pop("arrival", None)
            yield Row(line, ns_of(arrival) if arrival is not None else 0, item, f"-{n:05d}")


def _jsonl(stream: IO[bytes], options: ImportOptions,
           stats: ReadStats) -> Iterator[Row | RowError]:
    first = True
    for line, raw in _lines(stream):
        try:
            item = json.loads(raw)
        except ValueError:
            item = None
        if first and item is None and _looks_like_header(raw):
            stats.header_lines += 1
            first = False
            continue
        first = False
        try:
            if not isinstance(item, dict):
                raise ValueError("object")
            arrival = ns_of(parse_time(item.pop("arrival"), "arrival"))
        except (ValueError, KeyError, InvalidInput, TypeError):
            yield RowError(line, None, "unreadable_record",
                           "This line is not an observation object with an RFC 3339 arrival.")
            continue
        refused = body_fields(item)
        if refused:
            # Refused here as well as by the service: a body in the file never leaves the machine.
            yield RowError(line, refused[0], "body_field_refused",
                           "Prompt and output bodies are never accepted; remove this field.")
            continue
        item.pop("source", None)
        item.pop("provenance", None)
        yield Row(line, arrival, item)


_READERS = {"azure-csv": _azure, "mooncake-jsonl": _mooncake, "otlp-json": _otlp,
            "jsonl": _jsonl}


def read_rows(stream: IO[bytes], options: ImportOptions,
              stats: ReadStats | None = None) -> Iterator[Row | RowError]:
    """The file's records in file order (one pass; the stream is read as it goes)."""
    if options.fmt not in _READERS:
        raise InvalidInput("Unknown import format.", field="format")
    if options.timestamp_unit is not None and options.timestamp_unit not in TIMESTAMP_UNITS:
        raise InvalidInput("The timestamp unit is s, ms or us.", field="timestamp_unit")
    try:
        yield from _READERS[options.fmt](stream, options, stats or ReadStats())
    except UnicodeDecodeError as exc:
        raise InvalidInput("The file is not UTF-8 text.", field="file") from exc
    except csv.Error as exc:
        raise InvalidInput("The file is not readable CSV.", field="file") from exc


def check_timestamps(options: ImportOptions, stats: ReadStats) -> None:
    """Refuse timestamps of an unstated, ambiguous unit (after a first pass over the file)."""
    if options.fmt != "mooncake-jsonl" or options.timestamp_unit is not None:
        return
    reason = ambiguous_unit(stats)
    if reason is not None:
        raise InvalidInput(f"{reason}: pass --timestamp-unit s, ms or us.",
                           field="timestamp_unit")



class _Counting(io.RawIOBase):
    """A file read through a running SHA-256 and byte count (for digests and progress)."""

    def __init__(self, raw: IO[bytes], on_read: Callable[[int], None] | None = None):
        self._raw, self._on_read = raw, on_read
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if n:
            self.sha256.update(memoryview(buffer)[:n])
            self.bytes += n
            if self._on_read is not None:
                self._on_read(self.bytes)
        return int(n or 0)


@dataclass
class FileScan:
    """A first pass over a file: its digest and what placement and the import record need."""

    sha256: str
    size: int
    records: int
    rejected: int
    first_ns: int | None
    last_ns: int | None
    stats: ReadStats


def scan(path: Path, options: ImportOptions,
         on_read: Callable[[int, int], None] | None = None) -> FileScan:
    """Digest and read the whole file once, keeping only counts (constant memory)."""
    stats = ReadStats()
    records = rejected = 0
    first = last = None
    with path.open("rb", buffering=0) as raw:
        counting = _Counting(raw, None if on_read is None else lambda b: on_read(b, records))
        for row in read_rows(io.BufferedReader(counting, 1 << 20), options, stats):
            records += 1
            if isinstance(row, RowError):
                rejected += 1
                continue
            first = row.arrival_ns if first is None else min(first, row.arrival_ns)
            last = row.arrival_ns if last is None else max(last, row.arrival_ns)
        # Whatever the reader did not need still belongs to the digest.
        for chunk in iter(lambda: raw.read(1 << 20), b""):
            counting.sha256.update(chunk)
            counting.bytes += len(chunk)
        return FileScan(counting.sha256.hexdigest(), counting.bytes, records, rejected, first,
                        last, stats)


def stream_rows(path: Path, options: ImportOptions,
                on_read: Callable[[int], None] | None = None) -> Iterator[Row | RowError]:
    """The second pass: rows as they are read, `on_read(bytes so far)` as the file is consumed."""
    with path.open("rb", buffering=0) as raw:
        yield from read_rows(io.BufferedReader(_Counting(raw, on_read), 1 << 20), options)
