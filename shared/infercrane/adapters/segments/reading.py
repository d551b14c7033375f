"""A window read from segments: a k-way merge in (arrival, id, ingest order), deduplicated.

Segments are opened lazily, in order of their first arrival, only when the merge reaches it: a
segment is fetched when its first arrival is at or before the next row to return (with an empty
merge, the next segment and those sharing its first arrival). A window's memory is the segments
that overlap the current instant (one hour's), not the window's; a read stopped at `limit` fetches
only the segments its rows came from, and those starting with them.

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
read, like a `missing` one, rather than fail the window. A row that fails midway skips the rest of
its segment (the rows before it were already merged).

Everything the order reads is in the row or its object key, none of it in the index: SQL over
the segments keeps the same row with `row_number() OVER (PARTITION BY observation_id ORDER BY
arrival_ms, ingested_at_ms, "$path")` (docs/capture.md; copies at one arrival share a directory,
so their paths order as their segment ids do).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from infercrane.adapters.segments.layout import Segment, decode
from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import SCHEMA_VERSION

log = logging.getLogger(__name__)

# An id's fingerprint is remembered by its first 64 bits (an HMAC's: two contents of one id agree
# on them with probability 2**-64): 65 bytes a Python string, where the whole is 113.
_NAMED_DIGITS = 16

# What a corrupt or foreign object raises while decoded: bad gzip (OSError, EOFError, zlib.error),
# bad JSON (a ValueError), a row without a column (KeyError) or with one of another type.
_UNREADABLE = (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError)


@dataclass
class ReadCounts:
    duplicates: int = 0  # rows stored twice (a re-sent observation in another batch)
    conflicts: int = 0  # observations whose id already names other content: not returned
    missing: int = 0  # segments indexed but whose object is gone (being deleted): skipped
    unreadable: int = 0  # segments whose index item or object cannot be read: skipped
    segments: int = 0  # segments opened
    bytes_read: int = 0  # compressed bytes fetched
    returned: int = 0


class SegmentRead(Iterator[StoredObservation]):
    """The observations of [start_ms, end_ms) in (arrival_ms, observation_id) order; `counts`
    is complete once the iterator is exhausted (or stopped at `limit`)."""

    def __init__(self, segments: Iterable[Segment], fetch: Callable[[Segment], bytes | None],
                 start_ms: int, end_ms: int, limit: int | None = None,
                 decided: Mapping[str, str] | None = None,
                 requery: Callable[[int], Iterable[Segment]] | None = None):
        """`segments` in order of their first arrival (the index's sort order), read lazily: a
        read that stops early (`limit`) queries no more of the index than it needed. `decided`:
        the `named` of an earlier read of the whole window (read, never changed). `requery(ms)`:
        the index again (consistent) from arrival `ms` on, asked when an object is gone."""
        self.counts = ReadCounts()
        self._pending = iter(segments)
        self._peek: Segment | None = None
        self._fetch = fetch
        self._requery = requery
        # Sort keys of the segments met (opened or skipped): a re-query opens only the others.
        self._met: set[str] = set()
        self._start, self._end, self._limit = start_ms, end_ms, limit
        # (arrival, id, ingested, segment id, sequence, observation, rest of its segment, its
        # segment): the sequence is unique, so no comparison reaches the observation
        self._heap: list[tuple[int, str, int, str, int, StoredObservation,
                               Iterator[StoredObservation], Segment]] = []
        self._seq = 0
        self._last: tuple[int, str, str | None] | None = None
        self._decided: Mapping[str, str] = decided or {}
        self._named: dict[str, str] = {}  # client-chosen id -> its fingerprint's prefix, kept

    @property
    def named(self) -> Mapping[str, str]:
        """Client-chosen id -> the first `_NAMED_DIGITS` of the fingerprint this read kept for
        it (once exhausted: every client id of the read)."""
        return self._named

    def __iter__(self) -> SegmentRead:
        return self

    def unreadable(self, key: str) -> None:
        """Count a segment skipped as unreadable; its key (never a row) is logged."""
        self.counts.unreadable += 1
        log.warning("segment skipped: unreadable", extra={"key": key})

    def _push(self, seg: Segment, rows: Iterator[StoredObservation]) -> None:
        try:
            for o in rows:
                if o.arrival_ms >= self._end:
                    return
                if o.arrival_ms >= self._start:
                    self._seq += 1
                    heapq.heappush(self._heap, (o.arrival_ms, o.observation_id, o.ingested_at_ms,
                                                seg.seg_id, self._seq, o, rows, seg))
                    return
        except _UNREADABLE:
            self.unreadable(seg.key)

    def _open(self, seg: Segment) -> None:
        self._met.add(seg.sk)
        if seg.schema_version != SCHEMA_VERSION:
            self.unreadable(seg.key)
            return
        body = self._fetch(seg)
        if body is None:
            # A deletion cut it after our index page was read: its kept rows are in a survivor
            # indexed at its first arrival or later, maybe before the rest of our (older) page.
            self.counts.missing += 1
            log.warning("segment skipped: missing", extra={"key": seg.key})
            if self._requery is not None:
                # Only segments starting at or after the gone one's first arrival: the survivor
                # does (its rows are the gone one's), and one starting earlier (a batch indexed
                # after our page, or the survivor of a segment already read) would put rows
                # below arrivals already returned, duplicates among them.
                first = seg.min_arrival_ms
                self._peek = None
                self._pending = (s for s in self._requery(first)
                                 if s.sk not in self._met and s.min_arrival_ms >= first)
            return
        self.counts.segments += 1
        self.counts.bytes_read += len(body)
        # The index's claim about the object, checked before a byte is decoded: hashing is a
        # small part of decompressing and parsing the same bytes.
        if hashlib.sha256(body).hexdigest() != seg.sha256:
            self.unreadable(seg.key)
            return
        self._push(seg, decode(seg.tenant, seg.deployment, body))

    def _open_until(self, arrival_ms: int | None) -> None:
        """Open every segment whose first arrival is <= arrival_ms; with None, the next segment
        and every other sharing its first arrival (the merge cannot order them otherwise)."""
        while True:
            if self._peek is None:
                self._peek = next(self._pending, None)
            seg = self._peek
            if seg is None or seg.min_arrival_ms >= self._end or (
                    arrival_ms is not None and seg.min_arrival_ms > arrival_ms):
                return
            arrival_ms = seg.min_arrival_ms if arrival_ms is None else arrival_ms
            self._peek = None
            self._open(seg)

    def __next__(self) -> StoredObservation:
        if self._limit is not None and self.counts.returned >= self._limit:
            raise StopIteration
        while True:
            if not self._heap:
                self._open_until(None)
                if not self._heap:
                    if self._peek is None or self._peek.min_arrival_ms >= self._end:
                        raise StopIteration
                    continue  # what it opened held no row of the window: the next one
            self._open_until(self._heap[0][0])
            arrival, oid, _, _, _, o, rest, seg = heapq.heappop(self._heap)
            self._push(seg, rest)
            if self._last is not None and self._last[:2] == (arrival, oid):
                if self._last[2] == o.fingerprint:
                    self.counts.duplicates += 1
                else:
                    self.counts.conflicts += 1
                continue
            # Kept or dropped, the first copy in merge order decides for the copies after it.
            self._last = (arrival, oid, o.fingerprint)
            if o.fingerprint is not None:
                short = o.fingerprint[:_NAMED_DIGITS]
                seen = self._decided.get(oid) or self._named.setdefault(oid, short)
                if seen != short:
                    self.counts.conflicts += 1
                    continue
            self.counts.returned += 1
            return o
