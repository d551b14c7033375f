"""A window read from segments: a k-way merge in (arrival, id, ingest order), deduplicated.

Segments are opened lazily, in order of their first arrival, only when the merge reaches it: a
window's memory is the segments that overlap the current instant (one hour's), not the window's.

Dedup, deterministic whatever order the segments were written in:
- the same id with the same identity (the same fingerprint, or a derived `h-` id, which is its
  own) is one row: the earliest ingested (the row's `ingested_at_ms`, then its segment id) is
  kept, the rest counted as `duplicates`;
- the same id with another fingerprint is an id naming two contents, found across batches (a
  batch's own are refused when written): the first in merge order is kept (at one arrival the
  earliest ingested; else the earlier arrival), the rest counted as `conflicts`. Keeping the
  earliest ingested across two arrivals would need every id of the window before its first row
  (a second read of each segment, or the window in memory); a conflict is a client's bug, and
  this rule is as deterministic.

Everything the order reads is in the row or its object key, none of it in the index: SQL over
the segments keeps the same row with `row_number() OVER (PARTITION BY observation_id ORDER BY
arrival_ms, ingested_at_ms, "$path")` (docs/capture.md; copies at one arrival share a directory,
so their paths order as their segment ids do).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from infercrane.adapters.segments.layout import Segment, decode
from infercrane.domain.observation import StoredObservation


@dataclass
class ReadCounts:
    duplicates: int = 0  # rows stored twice (a re-sent observation in another batch)
    conflicts: int = 0  # rows whose id already names other content: not returned
    missing: int = 0  # segments indexed but whose object is gone (being deleted): skipped
    segments: int = 0  # segments opened
    bytes_read: int = 0  # compressed bytes fetched
    returned: int = 0


class SegmentRead(Iterator[StoredObservation]):
    """The observations of [start_ms, end_ms) in (arrival_ms, observation_id) order; `counts`
    is complete once the iterator is exhausted (or stopped at `limit`)."""

    def __init__(self, segments: Iterable[Segment], fetch: Callable[[Segment], bytes | None],
                 start_ms: int, end_ms: int, limit: int | None = None):
        """`segments` in order of their first arrival (the index's sort order), read lazily: a
        read that stops early (`limit`) queries no more of the index than it needed."""
        self.counts = ReadCounts()
        self._pending = iter(segments)
        self._peek: Segment | None = None
        self._fetch = fetch
        self._start, self._end, self._limit = start_ms, end_ms, limit
        # (arrival, id, ingested, segment id, sequence, observation, rest of its segment)
        self._heap: list[tuple[int, str, int, str, int, StoredObservation,
                               Iterator[StoredObservation]]] = []
        self._seq = 0
        self._last: tuple[int, str, str | None] | None = None
        self._named: dict[str, str] = {}  # client-chosen id -> fingerprint, as returned

    def __iter__(self) -> SegmentRead:
        return self

    def _push(self, seg_id: str, rows: Iterator[StoredObservation]) -> None:
        for o in rows:
            if o.arrival_ms >= self._end:
                return
            if o.arrival_ms >= self._start:
                self._seq += 1
                heapq.heappush(self._heap, (o.arrival_ms, o.observation_id, o.ingested_at_ms,
                                            seg_id, self._seq, o, rows))
                return

    def _open_until(self, arrival_ms: int | None) -> None:
        """Open every segment whose first arrival is <= arrival_ms (all of them when None)."""
        while True:
            if self._peek is None:
                self._peek = next(self._pending, None)
            seg = self._peek
            if seg is None or seg.min_arrival_ms >= self._end or (
                    arrival_ms is not None and seg.min_arrival_ms > arrival_ms):
                return
            self._peek = None
            body = self._fetch(seg)
            if body is None:
                self.counts.missing += 1
                continue
            self.counts.segments += 1
            self.counts.bytes_read += len(body)
            self._push(seg.seg_id, decode(seg.tenant, seg.deployment, body))

    def __next__(self) -> StoredObservation:
        if self._limit is not None and self.counts.returned >= self._limit:
            raise StopIteration
        while True:
            self._open_until(self._heap[0][0] if self._heap else None)
            if not self._heap:
                raise StopIteration
            arrival, oid, _, seg_id, _, o, rest = heapq.heappop(self._heap)
            self._push(seg_id, rest)
            if self._last is not None and self._last[:2] == (arrival, oid):
                if self._last[2] == o.fingerprint:
                    self.counts.duplicates += 1
                else:
                    self.counts.conflicts += 1
                continue
            if o.fingerprint is not None:
                seen = self._named.setdefault(oid, o.fingerprint)
                if seen != o.fingerprint:
                    self.counts.conflicts += 1
                    continue
            self._last = (arrival, oid, o.fingerprint)
            self.counts.returned += 1
            return o
