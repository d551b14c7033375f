"""Public trace file formats -> `Row`s, streamed (a file is never held in memory whole).

Formats (see docs/capture.md for the specs each follows):
  azure-csv       Azure LLM inference traces: `TIMESTAMP,ContextTokens,GeneratedTokens`. Times are
                  UTC, 2023 form `2023-11-16 18:15:46.6805900` (7-digit fraction, no offset) or
                  2024 form `2024-05-10 00:00:00.009930+00:00` (6 digits and an offset).
  mooncake-jsonl  Mooncake / AIPerf `mooncake_trace` (`adapters/mooncake_trace.py`, with how its
                  sessions carry their history).
  otlp-json       OTLP/JSON ExportTraceServiceRequest documents, one per line (or one file).
  jsonl           native observation items, one per line.

Each reader is one pass over bounded lines (`adapters/trace_input.py`: compression, stdin,
sniffing) and gives each row its canonical content, its identity. A first line that is not a
record (a CSV header, a column list) is a header, not a rejection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from decimal import Decimal
from itertools import chain
from typing import IO, Any

from infercrane.adapters.mooncake_trace import MooncakeReader, decide_history
from infercrane.adapters.trace_input import (
    MAX_LINE,
    ReadStats,
    TraceInput,
    azure_time_ns,
    check_format,
    damage_errors,
    damaged,
    head_lines,
    load_json,
    looks_like_header,
    text_lines,
)
from infercrane.domain.capture import body_fields, parse_time
from infercrane.domain.importers import (
    NS_PER_MS,
    ImportOptions,
    Row,
    RowError,
    RowIdentity,
    canonical,
    ns_of,
)
from infercrane.domain.otlp import map_document
from infercrane.errors import InvalidInput

FORMATS = ("azure-csv", "mooncake-jsonl", "otlp-json", "jsonl")
RELATIVE_FORMATS = frozenset({"mooncake-jsonl"})
# Units a mooncake timestamp may be given in (ns per unit). The spec says milliseconds.
TIMESTAMP_UNITS = {"s": 1_000_000_000, "ms": NS_PER_MS, "us": 1_000}
# Epoch-like values (>= 1e9) cannot be told apart as s, ms or us.
EPOCH_LIKE = Decimal(1_000_000_000)
# A pretty-printed OTLP document is read whole: no larger than the API takes in one request.
MAX_DOCUMENT = 10 * 1000 * 1000

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


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


_TOO_LONG = f"This line is over {MAX_LINE // (1 << 20)} MiB; it was skipped."


def _cells(raw: str) -> list[str]:
    # The published Azure files have no quoted fields; quotes around a cell are tolerated.
    return [c.strip().strip('"') for c in raw.split(",")]


def _azure(lines: Iterator[tuple[int, str | None]], options: ImportOptions,
           stats: ReadStats) -> Iterator[Row | RowError]:
    first = next(lines, None)
    names = _cells(first[1]) if first is not None and first[1] is not None else []
    if any(h not in names for h in _AZURE_COLUMNS):
        raise InvalidInput("An azure-csv file starts with TIMESTAMP,ContextTokens,GeneratedTokens.",
                           field="file")
    stats.header_lines += 1
    at_col, in_col, out_col = (names.index(h) for h in _AZURE_COLUMNS)
    for line, raw in lines:
        if raw is None:
            yield RowError(line, None, "line_too_long", _TOO_LONG)
            continue
        row = _cells(raw)
        if row == names:
            stats.header_lines += 1  # files joined with their headers
            continue
        try:
            at = azure_time_ns(row[at_col])
        except (ValueError, IndexError):
            yield RowError(line, "TIMESTAMP", "invalid_format",
                           "TIMESTAMP is not YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM] (UTC).")
            continue
        try:
            inp, out = int(row[in_col]), int(row[out_col])
        except (ValueError, IndexError):
            yield RowError(line, "ContextTokens", "invalid_type",
                           "ContextTokens and GeneratedTokens are whole numbers.")
            continue
        yield Row(line, at, {"input_tokens": inp, "output_tokens": out},
                  b"%d,%d,%d" % (at, inp, out))


def _mooncake(lines: Iterator[tuple[int, str | None]], options: ImportOptions,
              stats: ReadStats, check: bool = False) -> Iterator[Row | RowError]:
    reader = MooncakeReader(options, TIMESTAMP_UNITS[options.timestamp_unit or "ms"], stats,
                            check)
    for line, raw in lines:
        row = reader.row(line, raw)
        if row is not None:
            yield row


def _otlp(lines: Iterator[tuple[int, str | None]], options: ImportOptions,
          stats: ReadStats) -> Iterator[Row | RowError]:
    first = next(lines, None)
    if first is None:
        return
    documents: Iterator[tuple[int, Any]]
    if first[1] is not None and first[1].strip() == "{":
        # A pretty-printed single document: read whole, up to what one request may carry.
        parts, size = [first[1]], len(first[1])
        for _, raw in lines:
            size += MAX_LINE if raw is None else len(raw)
            if size > MAX_DOCUMENT:
                raise InvalidInput("A pretty-printed OTLP document over 10 MB cannot be read; "
                                   "export one document per line.", field="file")
            parts.append(raw or "")
        try:
            documents = iter([(1, load_json("".join(parts)))])
        except ValueError:
            yield RowError(1, None, "unreadable_record", "This line is not valid JSON.")
            return
    else:
        def per_line() -> Iterator[tuple[int, Any]]:
            for n, raw in chain([first], lines):
                try:
                    yield n, None if raw is None else load_json(raw)
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
        for item in mapping.items:
            for name in ("observation_id", "deployment", "revision"):
                item.pop(name, None)
            arrival = item.pop("arrival", None)
            at = ns_of(arrival) if arrival is not None else 0
            yield Row(line, at, item, canonical([at, item]))


def _jsonl(lines: Iterator[tuple[int, str | None]], options: ImportOptions,
           stats: ReadStats) -> Iterator[Row | RowError]:
    first = True
    for line, raw in lines:
        if raw is None:
            first = False
            yield RowError(line, None, "line_too_long", _TOO_LONG)
            continue
        try:
            item = load_json(raw)
        except ValueError:
            item = None
        if first and item is None and looks_like_header(raw):
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
        yield Row(line, arrival, item, canonical([arrival, item]))


_READERS = {"azure-csv": _azure, "mooncake-jsonl": _mooncake, "otlp-json": _otlp,
            "jsonl": _jsonl}


def read_rows(stream: IO[bytes], options: ImportOptions, stats: ReadStats | None = None,
              check: bool = False) -> Iterator[Row | RowError]:
    """The file's records in file order (one pass; the stream is read as it goes). The first
    lines are sniffed first: another format's file is refused before a row is read. `check`:
    identities and arrivals only (a session's blocks are not accumulated)."""
    if options.fmt not in _READERS:
        raise InvalidInput("Unknown import format.", field="format")
    if options.timestamp_unit is not None and options.timestamp_unit not in TIMESTAMP_UNITS:
        raise InvalidInput("The timestamp unit is s, ms or us.", field="timestamp_unit")
    lines = text_lines(stream)
    head = head_lines(lines)
    check_format(options.fmt, head)
    if options.fmt == "mooncake-jsonl":
        yield from _mooncake(chain(head, lines), options, stats or ReadStats(), check)
    else:
        yield from _READERS[options.fmt](chain(head, lines), options, stats or ReadStats())


def check_timestamps(options: ImportOptions, stats: ReadStats) -> None:
    """Refuse timestamps of an unstated, ambiguous unit (after a first pass over the file)."""
    if options.fmt != "mooncake-jsonl" or options.timestamp_unit is not None:
        return
    reason = ambiguous_unit(stats)
    if reason is not None:
        raise InvalidInput(f"{reason}: pass --timestamp-unit s, ms or us.",
                           field="timestamp_unit")


def _rows(source: TraceInput, options: ImportOptions, stats: ReadStats,
          on_read: Callable[[int], None] | None, check: bool) -> Iterator[Row | RowError]:
    """One pass over the input, its read errors said as what to do."""
    try:
        with source.open(on_read) as stream:
            yield from read_rows(stream, options, stats, check)
    except UnicodeDecodeError as exc:
        raise InvalidInput("The file is not UTF-8 text (gzip, bzip2, xz and zstd files are read "
                           "as such; this is none of them).", field="file") from exc
    except damage_errors() as exc:
        raise damaged(source.compression) from exc


@dataclass
class FileScan:
    """The check pass over an input: what placement, the import record and the send need."""

    rows_sha256: str  # the import's rows (`RowIdentity.digest`)
    size: int | None  # bytes read (as stored: compressed if it was)
    compression: str | None
    records: int
    rejected: int
    first_ns: int | None
    last_ns: int | None
    stats: ReadStats
    options: ImportOptions  # with the session history decided
    history_reason: str | None  # why that history, when the file decided it


class _Seen:
    """Counts, rows digest and arrival range of the rows one reading gives."""

    def __init__(self) -> None:
        self.identity = RowIdentity()
        self.first: int | None = None
        self.last: int | None = None

    def add(self, content: bytes, arrival_ns: int) -> None:
        self.identity.row_key(content, arrival_ns)
        self.first = arrival_ns if self.first is None else min(self.first, arrival_ns)
        self.last = arrival_ns if self.last is None else max(self.last, arrival_ns)


def scan(source: TraceInput, options: ImportOptions,
         on_read: Callable[[int, int], None] | None = None) -> FileScan:
    """Read the whole input once, keeping only counts and digests (constant memory); decide the
    session history and check the timestamps' unit. With the history undecided, both readings'
    arrivals (and so rows digests: ties are by instant) are kept until the evidence decides."""
    stats = ReadStats()
    main = _Seen()
    undecided = options.fmt == "mooncake-jsonl" and options.session_history is None
    alt = _Seen() if undecided else None
    counts = [0]  # records so far, for the progress callback
    rejected = 0
    for row in _rows(source, options, stats,
                     None if on_read is None else lambda b: on_read(b, counts[0]), check=True):
        counts[0] += 1
        if isinstance(row, RowError):
            rejected += 1
            continue
        main.add(row.content, row.arrival_ns)
        if alt is not None:
            alt.add(row.content, row.arrival_ns if row.alt_arrival_ns is None
                    else row.alt_arrival_ns)
    reason, seen = None, main
    if options.fmt == "mooncake-jsonl":
        history, reason = decide_history(options.session_history, stats.evidence)
        if alt is not None and history == "cumulative":
            seen = alt
        options = replace(options, session_history=history)
    check_timestamps(options, stats)
    if on_read is not None:
        on_read(source.size or 0, counts[0])
    return FileScan(seen.identity.digest(), source.size, source.compression, counts[0], rejected,
                    seen.first, seen.last, stats, options, reason)


def stream_rows(source: TraceInput, options: ImportOptions,
                on_read: Callable[[int], None] | None = None) -> Iterator[Row | RowError]:
    """The send pass: rows as they are read, `on_read(bytes so far)` as the input is consumed."""
    yield from _rows(source, options, ReadStats(), on_read, check=False)
