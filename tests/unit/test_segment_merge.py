"""A segment read returns what the documented dedup rules keep, whatever the segments' overlap,
read ahead or not: a reference written here (every row of the window sorted, then the rules of
adapters/segments/reading.py's module doc applied in that order) against the reader, over
random overlapping and disjoint segments with re-sent rows and ids naming two contents.

The reference shares nothing with the reader but `encode` (the bytes it reads) and the rules'
text: the kept copy of an (arrival, id) is the first in (arrival, id, ingested, segment id)
order; its other copies are duplicates (same fingerprint) or conflicts; an id whose first kept
fingerprint (or the given `decided` one) differs is a conflict at any later arrival."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.adapters.segments.layout import Segment, encode
from infercrane.adapters.segments.reading import SegmentRead
from infercrane.domain.observation import StoredObservation
from infercrane.errors import DependencyUnavailable

BASE_MS = 1_764_446_400_000
IDS = ("gw-0", "gw-1", "gw-2", "h-0", "h-1")
FPS = ("a" * 64, "b" * 64)
POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-readahead")


def _row(oid: str, arrival: int, fp: int, ingested: int, tokens: int) -> StoredObservation:
    return StoredObservation(
        tenant="demo", deployment="coder", observation_id=oid, arrival_ms=BASE_MS + arrival,
        input_tokens=tokens, output_tokens=1, latency_ms=1.0, outcome="ok", streaming=False,
        sampling_rate=1.0, source="captured", ingested_at_ms=BASE_MS + ingested,
        fingerprint=None if oid.startswith("h-") else FPS[fp])


# A segment: one row per id (a batch refuses an id named twice), at arrivals of a small range
# so that segments overlap, tie on arrival, and repeat ids.
_segment_rows = st.dictionaries(
    st.sampled_from(IDS),
    st.tuples(st.integers(0, 12), st.integers(0, 1), st.integers(0, 2), st.integers(0, 9)),
    min_size=1, max_size=5)


@st.composite
def _case(draw: Any) -> dict[str, Any]:
    segments = draw(st.lists(_segment_rows, min_size=1, max_size=7))
    # Spread: each segment in its own span (disjoint: the merge's fast path throughout),
    # else all in one (overlapping: the heap).
    spread = draw(st.sampled_from((0, 13, 6)))
    stored: list[tuple[Segment, bytes, list[StoredObservation]]] = []
    for i, rows in enumerate(segments):
        obs = [_row(oid, a + i * spread, fp, ing, tok) for oid, (a, fp, ing, tok) in rows.items()]
        body = encode(obs)
        seg_id = f"s{draw(st.integers(0, 2**32)):032x}{i}"
        arrivals = [o.arrival_ms for o in obs]
        stored.append((Segment("demo", "coder", seg_id, f"k/{seg_id}", len(obs), len(body),
                               min(arrivals), max(arrivals), hashlib.sha256(body).hexdigest(),
                               0, 2**40), body, obs))
    top = 13 + 7 * spread
    start = draw(st.integers(0, top))
    end = draw(st.integers(start, top + 1))
    decided = draw(st.dictionaries(st.sampled_from(IDS[:3]), st.sampled_from(FPS), max_size=2))
    return {"stored": stored, "start": BASE_MS + start, "end": BASE_MS + end,
            "limit": draw(st.none() | st.integers(1, 8)),
            "decided": {k: v[:16] for k, v in decided.items()}}


def _reference(case: dict[str, Any]) -> tuple[list[StoredObservation], dict[str, int],
                                             dict[str, str]]:
    rows = sorted(((o, seg.seg_id) for seg, _, obs in case["stored"] for o in obs
                   if case["start"] <= o.arrival_ms < case["end"]),
                  key=lambda r: (r[0].arrival_ms, r[0].observation_id, r[0].ingested_at_ms,
                                 r[1]))
    kept: list[StoredObservation] = []
    counts = {"duplicates": 0, "conflicts": 0}
    first_fp: dict[str, str] = dict(case["decided"])
    previous: StoredObservation | None = None
    for o, _ in rows:
        if case["limit"] is not None and len(kept) == case["limit"]:
            break
        if previous is not None and (previous.arrival_ms, previous.observation_id) == (
                o.arrival_ms, o.observation_id):
            counts["duplicates" if previous.fingerprint == o.fingerprint else "conflicts"] += 1
            continue
        previous = o
        if o.fingerprint is not None and first_fp.setdefault(
                o.observation_id, o.fingerprint[:16]) != o.fingerprint[:16]:
            counts["conflicts"] += 1
            continue
        kept.append(o)
    return kept, counts, first_fp


def _read(case: dict[str, Any], pool: ThreadPoolExecutor | None) -> SegmentRead:
    bodies = {seg.key: body for seg, body, _ in case["stored"]}
    index = sorted((seg for seg, _, _ in case["stored"]),
                   key=lambda seg: (seg.min_arrival_ms, seg.seg_id))
    return SegmentRead(index, lambda seg: bodies[seg.key], case["start"], case["end"],
                       case["limit"], case["decided"], pool=pool)


@settings(max_examples=400, deadline=None)
@given(_case())
def test_a_read_keeps_what_the_dedup_rules_keep_with_or_without_readahead(case):
    expected, counts, first_fp = _reference(case)
    for pool in (None, POOL):
        read = _read(case, pool)
        got = list(read)
        assert got == expected
        assert {"duplicates": read.counts.duplicates,
                "conflicts": read.counts.conflicts} == counts
        assert read.counts.returned == len(expected)
        # What a slice's read is given to decide as this one did (`decided`): each client id's
        # first fingerprint, those `decided` named already left out.
        assert read.named == {oid: fp for oid, fp in first_fp.items()
                              if oid not in case["decided"]}


def test_a_segment_with_a_bad_row_after_good_ones_yields_none_of_them():
    # Decoded before merged: a corrupt segment is skipped whole (its good first rows too).
    good = [_row("gw-0", 1, 0, 0, 1), _row("gw-1", 2, 0, 0, 1)]
    text = gzip.decompress(encode(good)) + json.dumps({"observation_id": "gw-2"}).encode()
    body = gzip.compress(text)
    seg = Segment("demo", "coder", "s1", "k/s1", 3, len(body), BASE_MS + 1, BASE_MS + 3,
                  hashlib.sha256(body).hexdigest(), 0, 2**40)
    other = encode([_row("gw-3", 4, 0, 0, 1)])
    seg2 = Segment("demo", "coder", "s2", "k/s2", 1, len(other), BASE_MS + 4, BASE_MS + 4,
                   hashlib.sha256(other).hexdigest(), 0, 2**40)
    bodies = {"k/s1": body, "k/s2": other}
    read = SegmentRead([seg, seg2], lambda s: bodies[s.key], BASE_MS, BASE_MS + 100)
    assert [o.observation_id for o in read] == ["gw-3"]
    assert (read.counts.unreadable, read.counts.segments) == (1, 2)


def _hours(n: int) -> tuple[list[Segment], dict[str, bytes]]:
    """n one-row segments, an hour apart, in index order."""
    segments, bodies = [], {}
    for h in range(n):
        body = encode([_row(f"gw-{h}", h * 3_600_000, 0, 0, h)])
        seg = Segment("demo", "coder", f"s{h:02d}", f"k/{h}", 1, len(body),
                      BASE_MS + h * 3_600_000, BASE_MS + h * 3_600_000,
                      hashlib.sha256(body).hexdigest(), 0, 2**40)
        segments.append(seg)
        bodies[seg.key] = body
    return segments, bodies


def test_a_fetch_error_read_ahead_surfaces_when_the_merge_reaches_its_segment():
    segments, bodies = _hours(8)

    def fetch(seg: Segment) -> bytes:
        if seg.seg_id == "s05":
            raise DependencyUnavailable("The observation store is unavailable.")
        return bodies[seg.key]

    read = SegmentRead(segments, fetch, BASE_MS, BASE_MS + 10 * 3_600_000, pool=POOL)
    got = [next(read).observation_id for _ in range(5)]
    assert got == [f"gw-{h}" for h in range(5)]  # every row before it, in order
    with pytest.raises(DependencyUnavailable):
        next(read)
    assert read.counts.segments == 5


def test_a_read_stopped_at_limit_cancels_the_loads_it_queued_ahead():
    # One worker: a load of s05 (after the limit's segments) blocks it until `gate` is set,
    # after the read stopped; the loads queued behind it (s06-s08, read ahead by then) must be
    # cancelled, never fetched. Whether s05 itself started before the stop is the scheduler's.
    segments, bodies = _hours(10)
    gate, fetched = threading.Event(), []

    def fetch(seg: Segment) -> bytes:
        fetched.append(seg.seg_id)
        if seg.seg_id == "s05":
            gate.wait(10)
        return bodies[seg.key]

    with ThreadPoolExecutor(max_workers=1) as pool:
        read = SegmentRead(segments, fetch, BASE_MS, BASE_MS + 10 * 3_600_000, limit=5,
                           pool=pool)
        assert [o.observation_id for o in itertools.islice(read, 5)] == [
            f"gw-{h}" for h in range(5)]
        gate.set()
    assert read.counts.segments == 5
    assert fetched[:5] == [f"s{h:02d}" for h in range(5)]
    assert fetched[5:] in ([], ["s05"])


def test_a_requery_after_a_gone_segment_drops_what_was_read_ahead_from_the_old_page():
    # s05 is gone when opened; by then s06 and s07 of the old page were loaded ahead. The index
    # read again names other segments from s05's arrival on (here: t06 only): the old page's
    # loads must not be opened, nor counted.
    old, bodies = _hours(8)
    bodies["k/t06"] = encode([_row("gw-new", 6 * 3_600_000, 0, 0, 6)])
    t06 = replace(old[6], seg_id="t06", key="k/t06",
                  sha256=hashlib.sha256(bodies["k/t06"]).hexdigest())

    def fetch(seg: Segment) -> bytes | None:
        return None if seg.seg_id == "s05" else bodies[seg.key]

    read = SegmentRead(old, fetch, BASE_MS, BASE_MS + 10 * 3_600_000,
                       requery=lambda ms: [t06], pool=POOL)
    assert [o.observation_id for o in read] == [f"gw-{h}" for h in range(5)] + ["gw-new"]
    assert (read.counts.segments, read.counts.missing) == (6, 1)


def _walk_failing_at(segments: list[Segment], at: int) -> Any:
    for i, seg in enumerate(segments):
        if i == at:
            raise DependencyUnavailable("The observation store is unavailable.")
        yield seg


@pytest.mark.parametrize("pool", [None, POOL], ids=["one by one", "read ahead"])
def test_an_index_page_failing_past_the_limit_does_not_fail_the_read(pool):
    # The index walk fails at its fifth item; a read stopped at three rows never needed it,
    # with or without readahead (which walks up to four items past the segment it opens).
    segments, bodies = _hours(10)
    read = SegmentRead(_walk_failing_at(segments, 4), lambda s: bodies[s.key], BASE_MS,
                       BASE_MS + 20 * 3_600_000, limit=3, pool=pool)
    assert [o.observation_id for o in read] == ["gw-0", "gw-1", "gw-2"]


@pytest.mark.parametrize("pool", [None, POOL], ids=["one by one", "read ahead"])
def test_an_index_page_failing_within_the_read_fails_it_where_the_merge_needs_it(pool):
    segments, bodies = _hours(10)
    read = SegmentRead(_walk_failing_at(segments, 4), lambda s: bodies[s.key], BASE_MS,
                       BASE_MS + 20 * 3_600_000, pool=pool)
    got = [next(read).observation_id for _ in range(3)]
    with pytest.raises(DependencyUnavailable):
        next(read)
    # The rows before it, in order, as one by one: the merge asks for the next index item
    # before handing out a segment's rows (they go out up to its first arrival), so the fourth
    # segment's row waits for the failed fifth item.
    assert got == [f"gw-{h}" for h in range(3)]


def test_a_read_that_ends_waits_briefly_for_the_loads_running_ahead(monkeypatch):
    # One worker, s05 loading slowly ahead when the limit's row is returned: the read waits
    # for it (up to SETTLE_S) so that no GET outlives the read into the next invocation.
    from infercrane.adapters.segments import reading

    monkeypatch.setattr(reading, "SETTLE_S", 30.0)
    segments, bodies = _hours(10)
    started, finished = threading.Event(), threading.Event()

    def fetch(seg: Segment) -> bytes:
        if seg.seg_id == "s05":
            started.set()
            threading.Event().wait(0.3)
            finished.set()
        return bodies[seg.key]

    with ThreadPoolExecutor(max_workers=1) as pool:
        read = SegmentRead(segments, fetch, BASE_MS, BASE_MS + 10 * 3_600_000, limit=5,
                           pool=pool)
        got = [o.observation_id for o in itertools.islice(read, 4)]
        assert started.wait(10)  # s05 is loading ahead before the limit's row is asked for
        got.append(next(read).observation_id)
        assert finished.is_set()  # waited for before the last row was handed out
    assert got == [f"gw-{h}" for h in range(5)]

