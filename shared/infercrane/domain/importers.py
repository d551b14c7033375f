"""Imports of trace files: row identity, import ids, placement, provenance and modelled timing.

The file formats themselves (Azure CSV, Mooncake/AIPerf JSONL, OTLP JSON, native JSONL) are read
by `infercrane.adapters.trace_files`, which yields `Row`s; this module turns each row into a
native observation item for the one ingest path.

Rows are identified by what they are, not by the file's bytes: a row's identity is its
canonical content (the fields its format defines, as values: no encoding, line ending, BOM,
compression or file name reaches it) and its ordinal among identical rows (`RowIdentity`). An
import is identified by the digest of its rows (a multiset: their order does not matter), and
`import_id` digests that, the format and every option that changes what is stored. An
observation's id is the service's prefix for the format and options (`domain/imports.py`) and a
digest of deployment, content and ordinal, so the same rows sent again, from any file, are
already present, and the store's idempotent write stores nothing. Files without latency get it
from `ServiceTimeModel`, a deterministic model recorded with its parameters, and are marked
`timing_source: "modeled"`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import rfc8785

from infercrane.clock import rfc3339
from infercrane.domain.capture import MAX_LATENCY_MS
from infercrane.errors import InvalidInput

DEFAULT_BLOCK_SIZE = 512  # tokens per hash-id block (AIPerf's mooncake_trace default)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NS_PER_MS = 1_000_000
# How a continuing session turn holds its history (adapters/mooncake_trace.py explains).
SESSION_HISTORIES = ("cumulative", "incremental")
# Identical rows, and rows of one instant, are counted among at least this many distinct recent
# values (each is kept in two generations of this size): identical rows have the same arrival,
# so in a time-ordered file they are neighbours. Bounded memory, ~10 MB at most.
ORDINAL_MEMORY = 32_768


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



@dataclass(frozen=True)
class ImportOptions:
    """Everything (besides the file) that decides what an import stores."""

    fmt: str
    deployment: str
    start: datetime | None = None
    model: ServiceTimeModel = field(default_factory=ServiceTimeModel)
    revision: str | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    timestamp_unit: str | None = None
    session_history: str | None = None  # None: decided from the file (check pass)

    def __post_init__(self) -> None:
        if self.start is not None and self.start.tzinfo is None:
            raise InvalidInput("The start time needs a timezone (use Z for UTC).", field="start")
        if not 1 <= self.block_size <= 1_000_000:
            raise InvalidInput("The block size is between 1 and 1,000,000 tokens.",
                               field="block_size")
        if self.session_history not in (None, *SESSION_HISTORIES):
            raise InvalidInput("The session history is cumulative or incremental.",
                               field="session_history")

    def recorded(self) -> dict[str, Any]:
        """The options as the import record and the import id hold them."""
        return {"start": None if self.start is None else rfc3339(self.start),
                "block_size": self.block_size, "timestamp_unit": self.timestamp_unit,
                "revision": self.revision, "timing_model": self.model.params(),
                "session_history": self.session_history}


def import_id(rows_sha256: str, options: ImportOptions) -> str:
    canon = rfc8785.dumps({"rows": f"sha256:{rows_sha256}", "format": options.fmt,
                           **options.recorded()})
    return "imp-" + hashlib.sha256(canon).hexdigest()[:24]


def canonical(value: Any) -> bytes:
    """A row's content as bytes that depend on its values only (keys sorted, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class RowKey:
    key: bytes  # SHA-256 of the content, with its ordinal among identical rows
    tie: int  # position among the import's rows of the same instant, in file order


class RowIdentity:
    """Row identities of one pass, `row_key` per row in file order, and `digest()` of them all
    (the sum of the rows' keys mod 2^256, with their count). Both counts (identical rows, rows of
    one instant) are kept for at least the last ORDINAL_MEMORY distinct values."""

    def __init__(self) -> None:
        # [current, previous] generation of each count: a full current one becomes the
        # previous (O(1); dropping a dict's oldest key one at a time made it quadratic).
        self._seen: list[dict[Any, int]] = [{}, {}]
        self._instants: list[dict[Any, int]] = [{}, {}]
        self._sum = 0
        self.rows = 0

    @staticmethod
    def _count(memo: list[dict[Any, int]], value: Any) -> int:
        current = memo[0]
        n = current.get(value)
        if n is None:
            n = memo[1].get(value, 0)
        current[value] = n + 1
        if len(current) >= ORDINAL_MEMORY:
            memo[0], memo[1] = {}, current
        return n

    def row_key(self, content: bytes, arrival_ns: int) -> RowKey:
        digest = hashlib.sha256(content).digest()
        ordinal = self._count(self._seen, digest[:16])
        key = digest if ordinal == 0 else hashlib.sha256(b"%s#%d" % (digest, ordinal)).digest()
        tie = self._count(self._instants, arrival_ns)
        summed = key if tie == 0 else hashlib.sha256(b"%s@%d" % (key, tie)).digest()
        self._sum = (self._sum + int.from_bytes(summed, "big")) % (1 << 256)
        self.rows += 1
        return RowKey(key, tie)

    def digest(self) -> str:
        return hashlib.sha256(b"%d:%064x" % (self.rows, self._sum)).hexdigest()


def observation_id(prefix: str, deployment: str, row: RowKey, placed_ns: int) -> str:
    """`prefix` (the service's, for the format and options), then what orders rows of one
    millisecond as the file did (the placed arrival's nanoseconds within it, then the row's
    position among rows of the same instant), then 32 hex digits of deployment and row."""
    return (f"{prefix}{placed_ns % NS_PER_MS:06d}{row.tie:06x}-"
            + hashlib.sha256(deployment.encode() + b"\0" + row.key).hexdigest()[:32])


@dataclass(frozen=True)
class Row:
    """One record of a file: its line, arrival (ns since the epoch, or since the file's own zero
    for relative formats) and native observation fields (never a body)."""

    line: int
    arrival_ns: int
    fields: dict[str, Any]
    content: bytes = b""  # the row's canonical content, its identity (with its ordinal)
    # The arrival a cumulative session history would give, while the history is undecided
    # (the check pass of a mooncake file); None when it is the same or decided.
    alt_arrival_ns: int | None = None


@dataclass(frozen=True)
class RowError:
    line: int
    field: str | None
    code: str
    message: str


def ns_of(dt: datetime) -> int:
    return (dt - EPOCH) // timedelta(microseconds=1) * 1000


class Placement:
    """Where rows land. Without `start`, at their own times (truncated to the millisecond).
    With it, the file's earliest arrival moves to `start` and offsets are kept exactly, in
    nanoseconds, then truncated once."""

    def __init__(self, start: datetime | None, first_ns: int | None, relative: bool):
        if relative and start is None:
            raise InvalidInput("This format has relative timestamps: pass a start time.",
                               field="start")
        self._start_ns = None if start is None else ns_of(start)
        self._first_ns = first_ns or 0

    def placed_ns(self, arrival_ns: int) -> int:
        if self._start_ns is None:
            return arrival_ns
        return self._start_ns + arrival_ns - self._first_ns

    def arrival_ms(self, arrival_ns: int) -> int:
        return self.placed_ns(arrival_ns) // NS_PER_MS

    def arrival(self, arrival_ns: int) -> str:
        # Clamped to what a datetime holds: a file time no clock holds (a timestamp of 1e300) is
        # then out of range by the service's one time-bounds rule (422 for the import record,
        # `out_of_range` for its row), never an OverflowError in the CLI.
        ms = min(max(self.arrival_ms(arrival_ns), _FIRST_MS), _LAST_MS)
        second, milli = divmod(ms, 1000)
        return f"{_second_text(second)}{milli:03d}Z"


@lru_cache(maxsize=4096)
def _second_text(second: int) -> str:
    """`rfc3339`'s text up to the milliseconds of a second since the epoch. Rows share their
    second with their neighbours: formatting each second once was ~1/10 of an import's CLI CPU."""
    return rfc3339(EPOCH + timedelta(seconds=second))[:-4]


_FIRST_MS = 0  # 1970: as out of range as anything earlier, and written in RFC 3339 (year 1 is not)
_LAST_MS = (datetime.max.replace(tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)


def observation_item(row: Row, options: ImportOptions, ident: str, provenance: str,
                     placement: Placement) -> dict[str, Any]:
    """The native item for one row, ready for `POST /v1/observations`."""
    item = dict(row.fields)
    item["observation_id"] = ident
    item["deployment"] = options.deployment
    if options.revision:
        item["revision"] = options.revision
    item["arrival"] = placement.arrival(row.arrival_ns)
    item["source"] = "imported"
    item["provenance"] = provenance
    if "latency_ms" not in item:
        ttft, latency = options.model.timing(int(item.get("input_tokens") or 0),
                                             int(item.get("output_tokens") or 0))
        item["latency_ms"] = latency
        item.setdefault("ttft_ms", ttft)
        item["timing_source"] = "modeled"
        item["timing_model"] = options.model.params()
    return item
