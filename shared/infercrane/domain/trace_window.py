"""A window of observations into a trace document: in memory (a window read whole in the
request) or streamed (an asynchronous build), both keeping the slice `trace_select` chooses when
the window holds more than `max_requests`. The two give the same document for the same window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from itertools import islice
from typing import IO, Protocol

from infercrane.domain.observation import StoredObservation
from infercrane.domain.trace import ENCODE_BATCH, EncodedTrace, RecordEncoder, encode_trace
from infercrane.domain.trace_select import Columns, choose, columns_of, describe, kept
from infercrane.domain.trace_stream import StreamedTrace, StreamingTraceBuilder
from infercrane.domain.windows import Window

# How often (in records read) a running asynchronous build records its progress.
PROGRESS_EVERY = 5_000


class Reader(Protocol):
    def __call__(self, start_ms: int, limit: int | None,
                 decided: Mapping[str, str] | None = None) -> Iterator[StoredObservation]:
        """The window's observations from start_ms to its end, in (arrival, id) order, at most
        `limit` (None: all); `decided` as the store's query (ports/observations.py)."""


def id_conflicts(read: Iterator[StoredObservation]) -> int:
    """Observations a finished read left out as id conflicts: a segment store's read counts them
    (ports/observations.py, `query`); other stores have none."""
    counts = getattr(read, "counts", None)
    return int(getattr(counts, "conflicts", 0))


def kept_names(read: Iterator[StoredObservation]) -> Mapping[str, str]:
    """What a finished read kept for each client id (`named`, opaque here), which a read of part
    of the window must be given to decide its conflicts alike; stores without conflicts: none."""
    named: Mapping[str, str] = getattr(read, "named", {})
    return named


def read_window(read: Iterator[StoredObservation], window: Window,
                encode_up_to: int) -> tuple[list[StoredObservation], RecordEncoder]:
    """Every observation of `read`, and their records made and encoded while it ran, a batch at
    a time (`RecordEncoder`: while each batch is fresh, and in the read's waits for the store),
    as long as they are at most `encode_up_to` (past it the build keeps a slice, or none)."""
    encoder = RecordEncoder(window.start_ms, encode_up_to)
    found: list[StoredObservation] = []
    while batch := list(islice(read, ENCODE_BATCH)):
        found += batch
        encoder.extend(batch)
    return found, encoder


def in_memory_trace(found: Sequence[StoredObservation], *, deployment: str, window: Window,
                    max_requests: int, select: str, built_at: datetime,
                    request_id: str | None, software: str | None,
                    conflicts: int = 0, encoder: RecordEncoder | None = None) -> EncodedTrace:
    """The trace of a window read whole (`found`, in (arrival, id) order), with its records'
    canonical bytes for a build that stores it; `encoder`: `read_window`'s."""
    if len(found) <= max_requests:
        return encode_trace(deployment=deployment, window=window, max_requests=max_requests,
                            observations=found, truncated=False, built_at=built_at,
                            request_id=request_id, software=software, id_conflicts=conflicts,
                            encoder=encoder)
    columns = columns_of(found)
    selection = choose(columns, max_requests, select)
    return encode_trace(deployment=deployment, window=window, max_requests=max_requests,
                        observations=[found[i] for i in selection.kept_indices(columns)],
                        truncated=True, built_at=built_at, request_id=request_id,
                        software=software, selection=describe(selection, columns, window),
                        id_conflicts=conflicts)


def stream_window(read: Reader, spool: IO[bytes], *, deployment: str, window: Window,
                  max_requests: int, select: str, progress: Callable[[int], None],
                  built_at: Callable[[], datetime], request_id: str | None,
                  software: str | None) -> StreamedTrace | None:
    """The trace of a window too large to hold, in constant memory but for the selection's
    columns; None when the window holds no observation.

    One read of the window spools records while it holds at most `max_requests` and collects the
    columns throughout. A window that held more then has its slice chosen from the columns, and
    only the slice is read again, into a fresh spool."""
    columns = Columns()
    builder: StreamingTraceBuilder | None = StreamingTraceBuilder(
        deployment=deployment, window=window, max_requests=max_requests, spool=spool)
    whole = read(window.start_ms, None)
    for obs in whole:
        columns.add(obs)
        if builder is not None:
            if builder.count == max_requests:
                builder = None  # truncated: the slice is built by the second read
            else:
                builder.add(obs)
        if len(columns) % PROGRESS_EVERY == 0:
            progress(len(columns))
    if not len(columns):
        return None
    conflicts = id_conflicts(whole)
    if builder is not None:
        return builder.finish(truncated=False, built_at=built_at(), request_id=request_id,
                              software=software, id_conflicts=conflicts)
    selection = choose(columns, max_requests, select)
    spool.seek(0)
    spool.truncate()
    builder = StreamingTraceBuilder(deployment=deployment, window=window,
                                    max_requests=max_requests, spool=spool)
    # Started at the slice, the read has not seen an id's earlier content: it is given what the
    # whole read kept, or it would keep the conflicting row the whole read left out.
    slice_read = read(columns.arrival[selection.start],
                      selection.skip + selection.end - selection.start, kept_names(whole))
    for obs in kept(slice_read, selection):
        builder.add(obs)
    return builder.finish(truncated=True, built_at=built_at(), request_id=request_id,
                          software=software, selection=describe(selection, columns, window),
                          id_conflicts=conflicts)
