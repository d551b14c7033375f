"""A window read from segments: a k-way merge in (arrival, id, ingest order), deduplicated.

Segments are opened lazily, in order of their first arrival, only when the merge reaches it: a
segment is fetched when its first arrival is at or before the next row to return (with an empty
merge, the next segment and those sharing its first arrival). A window's memory is the segments
that overlap the current instant (one hour's), not the window's; a read stopped at `limit` fetches
only the segments its rows came from, those starting with them, and those read ahead.

Readahead: the next segments the merge will open (in its order: the index's) are fetched, checked
against their sha256 and gunzipped in the store's pool (`load`: all of it releases the GIL, so the
server's time and the network's overlap the merge; S3 answers a GET in 20-50 ms), up to
`READAHEAD`; parsing (one `json.loads` a segment, `from_rows`) holds the GIL and is done when the
merge opens the segment. The depth starts at 0 and grows by one per segment the merge is done
with: a read stopped at `limit` within its first segments fetches none it does not open, and a
long read has `READAHEAD` in flight. Memory: at most `READAHEAD` segments' compressed and
decompressed bytes beyond the open ones (gateway-shaped rows: 16 KB + 212 KB a 500-row segment,
under 1 MB for 4). What `counts` counts is what the merge opened, never what was loaded ahead
and dropped: a fetch's error (DependencyUnavailable) is raised when the merge opens that segment,
in order; a gone object's re-query drops what was loaded ahead from the old index page; a read
exhausted, stopped at `limit`, failed or closed cancels its queued loads (running ones finish and
are dropped), as does collecting an abandoned read. The merge of one open segment whose rows
come before the next segment's first arrival (the common case: segments of one stream, an hour
each) passes them out without heap operations, with the same dedup below.

Dedup, deterministic whatever order the segments were written in:
- the same id with the same identity (the same fingerprint, or a derived `h-` id, which is its
  own) is one row: the earliest ingested (the row's `ingested_at_ms`, then its segment id) is
  kept, the rest counted as `duplicates`;
- the same id with another fingerprint is an id naming two contents, found across batches (a
  batch's own are refused when written): the first in merge order is kept (at one arrival the
  earliest ingested; else the earlier arrival), the rest counted as `conflicts` (one per
  observation: its other copies, at its arrival, are `duplicates`). Keeping the earliest ingested
  across two arrivals would need every id of the window before its first row (a second read of
  each segment, or the window in memory); a conflict is a client's bug, and this rule is as
  deterministic.

Finding a conflict across arrivals needs every client id of the window seen so far with (the
first 64 bits of) the fingerprint kept (`named`): it grows with the window's distinct client ids,
~170 B each (measured, docs/capture.md "Storage"), the one part of a read's memory that does not
stay one hour's. It is not bounded: an id may name other content at any later arrival, and
forgetting it would keep a row SQL over the segments drops. A read of part of a window (a
truncated build's slice) is given the whole read's `named` (`decided`), so it decides every
conflict as the whole read did.

A segment that cannot be read (its bytes differ from the sha256 its index item claims, a gzip or
JSON error, a row without a column, an index item of another schema version) is skipped and
counted `unreadable`, logged by its key only (never a row): the read answers with what it could
read, like a `missing` one, rather than fail the window. A segment is parsed whole before its
first row is merged: a bad row anywhere skips every row of its segment, all or nothing (when
rows were merged as parsed, the rows before a bad one were returned and the rest skipped).

Everything the order reads is in the row or its object key, none of it in the index: SQL over
the segments keeps the same row with `row_number() OVER (PARTITION BY observation_id ORDER BY
arrival_ms, ingested_at_ms, "$path")` (docs/capture.md; copies at one arrival share a directory,
so their paths order as their segment ids do).
"""

from __future__ import annotations

import gzip
import hashlib
import heapq
import logging
import zlib
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from infercrane.adapters.segments.layout import Segment, parse
from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import SCHEMA_VERSION

log = logging.getLogger(__name__)

# An id's fingerprint is remembered by its first 64 bits (an HMAC's: two contents of one id agree
# on them with probability 2**-64): 65 bytes a Python string, where the whole is 113.
_NAMED_DIGITS = 16

# Segments loaded ahead of the merge at most (the store's pool has as many threads): 8 threads
# fetched 216 segments from moto in 0.57 s against 0.70 s one by one (the server is the limit),
# and on S3 (20-50 ms a GET) 4 in flight keep a merge of ~500-row segments fed.
READAHEAD: Final = 4

# Seconds a read that ends (its limit, a close, an error) waits for loads already running ahead
# of it: on S3 a GET takes 20-50 ms; one that hangs is left to botocore's timeouts.
SETTLE_S: Final = 2.0

# What a corrupt or foreign object raises while decoded: bad gzip (OSError, EOFError, zlib.error),
# bad JSON (a ValueError), a row without a column (KeyError) or with one of another type.
_UNREADABLE = (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError)

_arrival = attrgetter("arrival_ms")

# What loading a segment found: (compressed bytes fetched, or None when the object is gone;
# its decompressed bytes, or None when they are not what the index claims or not gzip).
Loaded = tuple[int | None, bytes | None]


@dataclass
class ReadCounts:
    duplicates: int = 0  # rows stored twice (a re-sent observation in another batch)
    conflicts: int = 0  # observations whose id already names other content: not returned
    missing: int = 0  # segments indexed but whose object is gone (being deleted): skipped
    unreadable: int = 0  # segments whose index item or object cannot be read: skipped
    segments: int = 0  # segments opened
    bytes_read: int = 0  # compressed bytes fetched
    returned: int = 0


def count_unreadable(counts: ReadCounts, key: str) -> None:
    """Count a segment skipped as unreadable; its key (never a row) is logged."""
    counts.unreadable += 1
    log.warning("segment skipped: unreadable", extra={"key": key})


def load(fetch: Callable[[Segment], bytes | None], seg: Segment) -> Loaded:
    """Fetch, check and decompress one segment: a readahead worker's work, all of it with the
    GIL released (the GET's wait, hashing, gunzip), so it overlaps the merge. Parsing holds the
    GIL: done on the worker it only contended with the merge (100k rows: 0.1 s more CPU and a
    slower read than parsed when opened). The index's claim about the object is checked before
    a byte is decoded. Raises only what `fetch` raises (DependencyUnavailable)."""
    body = fetch(seg)
    if body is None:
        return None, None
    if hashlib.sha256(body).hexdigest() != seg.sha256:
        return len(body), None
    try:
        return len(body), gzip.decompress(body)
    except _UNREADABLE:
        return len(body), None


class _Ahead:
    """A segment taken from the pending ones, not opened yet; `loading` once read ahead."""

    __slots__ = ("loading", "seg")

    def __init__(self, seg: Segment):
        self.seg = seg
        self.loading: Future[Loaded] | None = None


class SegmentRead(Iterator[StoredObservation]):
    """The observations of [start_ms, end_ms) in (arrival_ms, observation_id) order; `counts`
    is complete once the iterator is exhausted (or stopped at `limit`)."""

    def __init__(self, segments: Iterable[Segment], fetch: Callable[[Segment], bytes | None],
                 start_ms: int, end_ms: int, limit: int | None = None,
                 decided: Mapping[str, str] | None = None,
                 requery: Callable[[int], Iterable[Segment]] | None = None, *,
                 pool: Executor | None = None, readahead: int = READAHEAD,
                 counts: ReadCounts | None = None):
        """`segments` in order of their first arrival (the index's sort order), read lazily: a
        read that stops early (`limit`) queries no more of the index than it needed. `decided`:
        the `named` of an earlier read of the whole window (read, never changed). `requery(ms)`:
        the index again (consistent) from arrival `ms` on, asked when an object is gone.
        `pool`: where up to `readahead` segments are loaded ahead of the merge (None: each is
        loaded when opened, on the calling thread). `counts`: the read's counts, given when the
        index walk counts its unreadable items into them."""
        self.counts = counts if counts is not None else ReadCounts()
        self._pending = iter(segments)
        self._walk_error: Exception | None = None  # met by readahead, for `_take_pending`
        # Segments taken from `_pending` and not opened yet, in the order the merge opens them:
        # the first `_depth` of them are loading in `_pool`.
        self._ahead: deque[_Ahead] = deque()
        self._pool = pool
        self._max_depth = readahead if pool is not None else 0
        # Grows by one per segment the merge is done with: a read stopped at `limit` within
        # its first segments fetches no segment it does not open.
        self._depth = 0
        self._fetch = fetch
        self._requery = requery
        # Sort keys of the segments met (opened or skipped): a re-query opens only the others.
        self._met: set[str] = set()
        self._start, self._end, self._limit = start_ms, end_ms, limit
        # (arrival, id, ingested, segment id, sequence, position, its segment's rows, its
        # segment): the sequence is unique, so no comparison reaches the position
        self._heap: list[tuple[int, str, int, str, int, int, list[StoredObservation],
                               Segment]] = []
        self._seq = 0
        self._decided: Mapping[str, str] = decided or {}
        self._named: dict[str, str] = {}  # client-chosen id -> its fingerprint's prefix, kept
        # Holds the read (a cycle the garbage collector breaks; its `finally` then drops what
        # was loading ahead for a read abandoned midway).
        self._rows = self._merge()

    @property
    def named(self) -> Mapping[str, str]:
        """Client-chosen id -> the first `_NAMED_DIGITS` of the fingerprint this read kept for
        it (once exhausted: every client id of the read)."""
        return self._named

    def __iter__(self) -> Iterator[StoredObservation]:
        # The merge itself: a loop resumed per row, where a method call a row (or three) was a
        # third of the merge's CPU.
        return self._rows

    def __next__(self) -> StoredObservation:
        return next(self._rows)

    def close(self) -> None:
        """End the read: segments loading ahead are dropped (queued loads cancelled). Done when
        it is exhausted, stopped at `limit` or fails, and when it is garbage-collected."""
        self._rows.close()

    def _drop_ahead(self, settle_s: float = 0.0) -> None:
        """Cancel the loads queued ahead; with `settle_s`, wait up to that long for those
        already running (the read is ending: on Lambda a GET still running when the handler
        returns is frozen with the environment and holds a pool thread into the next
        invocation)."""
        running = [entry.loading for entry in self._ahead
                   if entry.loading is not None and not entry.loading.cancel()]
        self._ahead.clear()
        if settle_s and running:
            wait(running, timeout=settle_s)

    def _take_pending(self) -> Segment | None:
        """The index walk's next segment (None at its end). An error the walk raised while
        reading ahead is raised here, where the merge itself needs that item: a read stopped
        at `limit` before it never fails for an index page it did not need (a walk that raised
        is over, so the error is kept, not retried)."""
        if self._walk_error is not None:
            raise self._walk_error
        return next(self._pending, None)

    def _next_segment(self) -> Segment | None:
        """The next segment the merge opens, not opened."""
        if not self._ahead:
            seg = self._take_pending()
            if seg is None:
                return None
            self._ahead.append(_Ahead(seg))
        return self._ahead[0].seg

    def _read_ahead(self) -> None:
        """Start loading the next `_depth` segments the merge will open (not those it will
        skip unfetched: past the window, or of another schema)."""
        if not self._depth:
            return
        ahead = self._ahead
        for i in range(self._depth):
            if i == len(ahead):
                if self._walk_error is not None:
                    return
                try:
                    seg = next(self._pending, None)
                except Exception as exc:  # kept: raised when the merge reaches the item
                    self._walk_error = exc
                    return
                if seg is None:
                    return
                ahead.append(_Ahead(seg))
            entry = ahead[i]
            if entry.seg.min_arrival_ms >= self._end:
                return
            if entry.loading is None and entry.seg.schema_version == SCHEMA_VERSION:
                assert self._pool is not None  # _depth stays 0 without one
                entry.loading = self._pool.submit(load, self._fetch, entry.seg)

    def _done_with(self) -> None:
        """The merge is done with a segment: read one more ahead (up to `_max_depth`)."""
        if self._depth < self._max_depth:
            self._depth += 1
            self._read_ahead()

    def _push(self, seg: Segment, rows: list[StoredObservation], pos: int) -> None:
        if pos < len(rows) and rows[pos].arrival_ms < self._end:
            o = rows[pos]
            self._seq += 1
            heapq.heappush(self._heap, (o.arrival_ms, o.observation_id, o.ingested_at_ms,
                                        seg.seg_id, self._seq, pos, rows, seg))
        else:
            self._done_with()

    def _open(self, seg: Segment, loading: Future[Loaded] | None) -> None:
        self._met.add(seg.sk)
        if seg.schema_version != SCHEMA_VERSION:
            count_unreadable(self.counts, seg.key)
            return
        # A load's error (DependencyUnavailable) is raised here: when the merge opens it.
        size, text = loading.result() if loading is not None else load(self._fetch, seg)
        if size is None:
            # A deletion cut it after our index page was read: its kept rows are in a survivor
            # indexed at its first arrival or later, maybe before the rest of our (older) page.
            self.counts.missing += 1
            log.warning("segment skipped: missing", extra={"key": seg.key})
            if self._requery is not None:
                # Only segments starting at or after the gone one's first arrival: the survivor
                # does (its rows are the gone one's), and one starting earlier (a batch indexed
                # after our page, or the survivor of a segment already read) would put rows
                # below arrivals already returned, duplicates among them. What was loaded
                # ahead from the old page is dropped: the new one is read ahead afresh.
                first = seg.min_arrival_ms
                self._drop_ahead()
                self._walk_error = None  # that walk is replaced
                self._pending = (s for s in self._requery(first)
                                 if s.sk not in self._met and s.min_arrival_ms >= first)
            return
        self.counts.segments += 1
        self.counts.bytes_read += size
        try:
            rows = None if text is None else parse(seg.tenant, seg.deployment, text)
        except _UNREADABLE:
            rows = None
        if rows is None:
            count_unreadable(self.counts, seg.key)
            return
        self._push(seg, rows, bisect_left(rows, self._start, key=_arrival))

    def _open_until(self, arrival_ms: int | None) -> None:
        """Open every segment whose first arrival is <= arrival_ms; with None, the next segment
        and every other sharing its first arrival (the merge cannot order them otherwise)."""
        while True:
            seg = self._next_segment()
            if seg is None or seg.min_arrival_ms >= self._end or (
                    arrival_ms is not None and seg.min_arrival_ms > arrival_ms):
                return
            arrival_ms = seg.min_arrival_ms if arrival_ms is None else arrival_ms
            self._open(seg, self._ahead.popleft().loading)
            self._read_ahead()

    def _merge(self) -> Generator[StoredObservation, None, None]:
        """The rows in merge order, deduplicated (module doc), until `limit` are returned."""
        heap, counts, end, limit = self._heap, self.counts, self._end, self._limit
        decided, named = self._decided, self._named
        # The id an earlier read kept decides, else the first seen here (remembered): a read
        # of a whole window has no earlier read, and asks one dict a row instead of two.
        keeper: Callable[[str, str], str | None] = named.setdefault if not decided else (
            lambda oid, short: decided.get(oid) or named.setdefault(oid, short))
        last_arrival: int | None = None  # the row before, in merge order
        last_oid, last_fp = "", None
        try:
            while limit is None or counts.returned < limit:
                if not heap:
                    self._open_until(None)
                    if not heap:
                        seg = self._next_segment()
                        if seg is None or seg.min_arrival_ms >= end:
                            return
                        continue  # what it opened held no row of the window: the next one
                batch: Sequence[StoredObservation]
                nxt = self._next_segment() if len(heap) == 1 else None
                bound = end if nxt is None else min(end, nxt.min_arrival_ms)
                if len(heap) == 1 and heap[0][0] < bound:
                    # The fast path: the one open segment's rows before the next segment's
                    # first arrival (no segment to open among them) go out as they are.
                    _, _, _, _, _, pos, rows, seg = heap.pop()
                    stop = bisect_left(rows, bound, lo=pos, key=_arrival)
                    batch, pos = rows[pos:stop], stop
                else:
                    self._open_until(heap[0][0])
                    _, _, _, _, _, pos, rows, seg = heapq.heappop(heap)
                    batch, pos = (rows[pos],), pos + 1
                for o in batch:
                    arrival, oid, fp = o.arrival_ms, o.observation_id, o.fingerprint
                    if arrival == last_arrival and oid == last_oid:
                        if fp == last_fp:
                            counts.duplicates += 1
                        else:
                            counts.conflicts += 1
                        continue
                    # Kept or dropped, the first copy in merge order decides for those after.
                    last_arrival, last_oid, last_fp = arrival, oid, fp
                    if fp is not None:
                        short = fp[:_NAMED_DIGITS]
                        if keeper(oid, short) != short:
                            counts.conflicts += 1
                            continue
                    counts.returned += 1
                    if counts.returned == limit:  # nothing more is read: drop what is ahead now
                        self._drop_ahead(SETTLE_S)
                        yield o
                        return
                    yield o
                # Its rest back in the merge once these are out: a read stopped at `limit`
                # among them is not done with the segment, and reads none ahead for it.
                self._push(seg, rows, pos)
        finally:
            self._drop_ahead(SETTLE_S)
