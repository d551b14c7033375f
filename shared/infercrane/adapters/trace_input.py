"""Trace files as users have them: a path or `-` (stdin, a pipe), compressed or not, in any of the
import formats, read as bounded lines.

- Compression is recognised by its magic bytes, whatever the file is called: gzip, bzip2, xz and
  zstd are read as streams (constant memory; concatenated members and frames included).
- An import reads its input in two passes (checked whole, then sent: the import is registered,
  and may be refused, before anything is sent). A regular file is simply opened twice. Any other
  input (stdin, a pipe, /dev/stdin) is read once: the first pass copies the bytes as they arrive
  (still compressed) into an anonymous temporary file, which the second pass reads.
- A line is at most MAX_LINE characters: a longer one is reported as one rejected record and
  skipped without being held, so no input can make a reader hold more than one line.
- The format is sniffed from the first lines, so a file given under the wrong `--format` is
  refused at once, naming the format it looks like.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import math
import os
import re
import stat
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from typing import IO, Any

from infercrane.domain.importers import ns_of
from infercrane.errors import InvalidInput

MAX_LINE = 8 * 1024 * 1024  # characters: a Mooncake row with its dropped text fits
# The head looked at to recognise the format: this many non-blank lines, or characters, at most.
SNIFF_LINES, SNIFF_CHARS = 16, 1 << 20
_CHUNK = 1 << 20
# Magic bytes -> compression (each format's own specification).
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
          (b"\x28\xb5\x2f\xfd", "zstd"))
# What a damaged stream raises in each decompressor (zstandard's error class is added on use).
_DAMAGED: tuple[type[BaseException], ...] = (EOFError, OSError, lzma.LZMAError)

_AZURE_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?$")


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


@dataclass
class SessionEvidence:
    """How a file's follow-up turns hold their history (`mooncake_trace.decide_history`)."""

    follow_ups: int = 0  # turns continuing a session
    cumulative: int = 0  # follow-ups repeating the previous turn's blocks
    incremental: int = 0  # follow-ups (of a turn with >= 2 blocks) not repeating them


@dataclass
class ReadStats:
    """What a pass over a file saw besides its rows: headers, content fields dropped and unknown
    fields (counts), mooncake timestamps' range in file units (for the unit check) and the
    session-history evidence."""

    header_lines: int = 0
    dropped_fields: Counter[str] = field(default_factory=Counter)
    ignored_fields: Counter[str] = field(default_factory=Counter)
    timestamps: int = 0
    min_timestamp: Decimal | None = None
    max_timestamp: Decimal | None = None
    evidence: SessionEvidence = field(default_factory=SessionEvidence)

    def saw_timestamp(self, value: Decimal) -> None:
        self.timestamps += 1
        if self.min_timestamp is None or value < self.min_timestamp:
            self.min_timestamp = value
        if self.max_timestamp is None or value > self.max_timestamp:
            self.max_timestamp = value


def looks_like_header(raw: str) -> bool:
    """A column list (names separated by commas or tabs, no JSON object): a header line."""
    text = raw.strip()
    return not text.startswith("{") and bool(re.match(r"^[A-Za-z_# ][\w ,\t#.-]*$", text))


def compression_of(head: bytes) -> str | None:
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def _decompressed(buffered: io.BufferedReader) -> tuple[Any, str | None]:
    kind = compression_of(buffered.peek(8)[:8])
    if kind == "gzip":
        return gzip.GzipFile(fileobj=buffered, mode="rb"), kind
    if kind == "bzip2":
        return bz2.BZ2File(buffered), kind
    if kind == "xz":
        return lzma.LZMAFile(buffered), kind
    if kind == "zstd":
        import zstandard  # only the CLI has it (extra `cli`), and only a .zst file needs it

        reader = zstandard.ZstdDecompressor().stream_reader(buffered, read_across_frames=True)
        return io.BufferedReader(reader, _CHUNK), kind
    return buffered, None


class _Counting(io.RawIOBase):
    """The raw input, counted as it is read (progress) and copied to `spool` when there is one."""

    def __init__(self, raw: IO[bytes], on_read: Callable[[int], None] | None,
                 spool: IO[bytes] | None):
        self._raw, self._on_read, self._spool = raw, on_read, spool
        self.bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if n:
            if self._spool is not None:
                self._spool.write(memoryview(buffer)[:n])
            self.bytes += n
            if self._on_read is not None:
                self._on_read(self.bytes)
        return int(n or 0)

    def drain(self) -> None:
        """Read what the reader left (so a spool holds the whole input)."""
        buffer = bytearray(_CHUNK)
        while self.readinto(buffer):
            pass


class TraceInput:
    """A path, or `-` for stdin. `open()` may be called twice (the check pass, then the send)."""

    def __init__(self, name: str):
        self.name = name
        self.label = "stdin" if name == "-" else os.path.basename(name)
        self._spool: IO[bytes] | None = None
        self._passes = 0
        self.regular = False
        self.size: int | None = None
        if name != "-":
            try:
                info = os.stat(name)
            except OSError as exc:
                raise InvalidInput("The file cannot be read; check its path.",
                                   field="file") from exc
            if stat.S_ISDIR(info.st_mode):
                raise InvalidInput("This is a folder, not a file.", field="file")
            self.regular = stat.S_ISREG(info.st_mode)
            self.size = info.st_size if self.regular else None
        self.compression: str | None = None

    @contextmanager
    def open(self, on_read: Callable[[int], None] | None = None) -> Iterator[IO[bytes]]:
        """The input's bytes, decompressed. A non-regular input is read from its source the
        first time and from the spool after."""
        self._passes += 1
        spool = None
        if self.regular:
            raw: IO[bytes] = open(self.name, "rb", buffering=0)  # noqa: SIM115
        elif self._passes == 1:
            raw = sys.stdin.buffer if self.name == "-" else open(self.name, "rb", buffering=0)  # noqa: SIM115
            spool = self._spool = tempfile.TemporaryFile()  # noqa: SIM115
        else:
            if self._spool is None:
                raise RuntimeError("the first pass did not run")
            self._spool.seek(0)
            raw, self.size = self._spool, self._spool.seek(0, io.SEEK_END)
            self._spool.seek(0)
        counting = _Counting(raw, on_read, spool)
        try:
            stream, self.compression = _decompressed(io.BufferedReader(counting, _CHUNK))
            yield stream
            if spool is not None:
                counting.drain()
                self.size = counting.bytes
        finally:
            if raw is not sys.stdin.buffer and raw is not self._spool:
                raw.close()

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


def damaged(compression: str | None) -> InvalidInput:
    what = f"{compression} stream" if compression else "file"
    return InvalidInput(f"The {what} is damaged or cut short; check the download.", field="file")


def damage_errors() -> tuple[type[BaseException], ...]:
    """What a damaged compressed stream raises while being read."""
    try:
        import zstandard
    except ImportError:  # not installed: no .zst file can have been opened
        return _DAMAGED
    return (*_DAMAGED, zstandard.ZstdError)


def text_lines(stream: IO[bytes]) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of each non-blank line, a BOM dropped; text None for a line over
    MAX_LINE characters, which is skipped in bounded chunks, never held."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    n = 0
    while True:
        line = text.readline(MAX_LINE + 1)
        if not line:
            return
        n += 1
        if len(line) > MAX_LINE and not line.endswith(("\n", "\r")):
            while True:
                rest = text.readline(_CHUNK)
                if not rest or rest.endswith(("\n", "\r")):
                    break
            yield n, None
        elif line.strip():
            yield n, line


def head_lines(lines: Iterator[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    """The first lines, for sniffing (the caller reads them again, then the rest)."""
    head: list[tuple[int, str | None]] = []
    size = 0
    for entry in lines:
        head.append(entry)
        size += MAX_LINE if entry[1] is None else len(entry[1])
        if len(head) >= SNIFF_LINES or size >= SNIFF_CHARS:
            break
    return head


@dataclass(frozen=True)
class Sniffed:
    fmt: str | None  # the format the first lines look like, or None (nothing recognised)
    lines: int  # non-blank lines looked at


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number past a double's range")
    return value


def load_json(text: str) -> Any:
    """A record's JSON as the service will read it: NaN, Infinity and numbers past a double's
    range are not JSON (the API refuses a body holding one, which would stop a whole batch), and
    nesting too deep for the parser is unreadable, not a RecursionError: each is a ValueError, so
    the caller reports that row alone."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _record_format(line: str) -> str | None:
    text = line.strip()
    if text.startswith("{"):
        try:
            doc = load_json(text)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        if "resourceSpans" in doc:
            return "otlp-json"
        if "arrival" in doc or "input_tokens" in doc:
            return "jsonl"
        if doc.keys() & {"input_length", "output_length", "hash_ids", "text_input", "delay"}:
            return "mooncake-jsonl"
        return None
    cells = [c.strip().strip('"') for c in text.split(",")]
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= set(cells):
        return "azure-csv"
    try:
        azure_time_ns(cells[0])
    except ValueError:
        return None
    return "azure-csv" if len(cells) == 3 else None


def sniff(head: list[tuple[int, str | None]]) -> Sniffed:
    """The format of the first recognisable line among `head`. A pretty-printed OTLP document
    (a lone `{`) is recognised by its `resourceSpans` key within the head."""
    texts = [line for _, line in head if line is not None]
    if texts and texts[0].strip() == "{":
        return Sniffed("otlp-json" if any('"resourceSpans"' in t for t in texts) else None,
                       len(texts))
    for line in texts:
        found = _record_format(line)
        if found is not None:
            return Sniffed(found, len(texts))
    return Sniffed(None, len(texts))


def check_format(fmt: str, head: list[tuple[int, str | None]]) -> None:
    """Refuse a file whose first lines are another format's, or no format's."""
    found = sniff(head)
    if found.lines == 0 or found.fmt == fmt:
        return
    if found.fmt is not None:
        raise InvalidInput(f"This file looks like {found.fmt}, not {fmt}: pass --format "
                           f"{found.fmt}.", field="format")
    what = ("The first line is not a record" if found.lines == 1
            else f"The first {found.lines} lines are not records")
    raise InvalidInput(f"{what} of {fmt}, nor of any other import format (docs/capture.md "
                       "lists them).", field="format")
