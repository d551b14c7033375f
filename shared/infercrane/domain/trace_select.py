"""Which requests a trace keeps when its window holds more than `max_requests`.

A trace is a contiguous slice of the window (in (arrival, id) order) of at most `max_requests`
observations, chosen by one of three methods:

- `head`: the earliest ones;
- `busiest`: the slice with the highest arrival rate, i.e. the shortest first-to-last arrival
  span among all slices of `max_requests` consecutive observations (exact, every start tried);
- `representative`: the slice whose input-token, output-token and inter-arrival distributions
  are closest to the whole window's: the smallest largest two-sample KS statistic D of the three
  (`drift.ks_sorted`, the statistic `trace compare` reports), over a coarse grid of start
  points, each scored exactly.

A slice never cuts a session: a session is kept only when all its turns in the window lie in
the slice (replay tools refuse a session that starts mid-conversation or stops short); the
others are left out and counted. Selection works on compact columns (arrival, tokens, a 64-bit
session key) of the whole window, ~40 bytes an observation plus ~100 a session, read before any
record is encoded: a streamed build reads the window twice, first for the columns, then only the
chosen slice.
"""

from __future__ import annotations

import hashlib
import itertools
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from infercrane.clock import rfc3339
from infercrane.domain.drift import ks_sorted
from infercrane.domain.observation import StoredObservation
from infercrane.domain.windows import Window, from_epoch_ms
from infercrane.errors import InvalidInput

Method = Literal["head", "busiest", "representative"]
METHODS: tuple[str, ...] = get_args(Method)
DEFAULT_METHOD: Method = "representative"
# Start points a representative selection scores (evenly spaced, both ends included): each
# costs three sorts and three bisections of `max_requests` values against the window.
GRID_POINTS = 64
# Below this share of the window's traffic span the CLI warns that the slice may not stand for
# the window.
LOW_COVERAGE = 0.10


def check_method(method: str) -> str:
    if method not in METHODS:
        raise InvalidInput("select is one of head, busiest, representative.", field="select")
    return method


def session_key(session_id: str | None) -> int:
    """A deterministic 64-bit key of a session identity (0: no session). Collisions would only
    merge two sessions' keep-or-leave decision; at 2^-64 per pair they are not a concern."""
    if session_id is None:
        return 0
    return int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest()) or 1


class Columns:
    """The compact per-observation columns selection needs, appended in (arrival, id) order."""

    def __init__(self) -> None:
        self.arrival = array("q")
        self.input_tokens = array("q")
        self.output_tokens = array("q")
        self.session = array("Q")
        self._bounds: dict[int, tuple[int, int]] = {}  # session key -> (first, last) index

    def __len__(self) -> int:
        return len(self.arrival)

    def add(self, obs: StoredObservation) -> None:
        index = len(self.arrival)
        self.arrival.append(obs.arrival_ms)
        self.input_tokens.append(int(obs.input_tokens))
        self.output_tokens.append(int(obs.output_tokens))
        key = session_key(obs.session_id)
        self.session.append(key)
        if key:
            first, _ = self._bounds.get(key, (index, index))
            self._bounds[key] = (first, index)

    def bounds(self, key: int) -> tuple[int, int]:
        return self._bounds[key]


@dataclass(frozen=True)
class Selection:
    """The chosen slice [start, end) of the window's observations and who is left out of it."""

    method: str
    start: int
    end: int
    left_out: frozenset[int]  # session keys with turns outside the slice
    candidates: int
    skip: int  # observations at the start's arrival ms that precede it (a read by time sees them)

    def keeps(self, index: int, key: int) -> bool:
        return self.start <= index < self.end and key not in self.left_out

    def kept_indices(self, columns: Columns) -> list[int]:
        return [i for i in range(self.start, self.end) if columns.session[i] not in self.left_out]


def _inter_arrivals(arrivals: Sequence[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(arrivals)]


class _Reference:
    """The whole window's three distributions, sorted once."""

    def __init__(self, columns: Columns):
        self.columns = columns
        self.sorted = {"input_tokens": sorted(columns.input_tokens),
                       "output_tokens": sorted(columns.output_tokens),
                       "inter_arrival_ms": sorted(_inter_arrivals(columns.arrival))}

    def distances(self, arrivals: Sequence[int], inputs: Sequence[int],
                  outputs: Sequence[int]) -> dict[str, float | None]:
        samples = {"input_tokens": inputs, "output_tokens": outputs,
                   "inter_arrival_ms": _inter_arrivals(arrivals)}
        return {name: ks_sorted(self.sorted[name], sorted(values))
                if values and self.sorted[name] else None for name, values in samples.items()}


def _score(distances: dict[str, float | None]) -> tuple[float, float]:
    known = [d for d in distances.values() if d is not None]
    return (max(known), sum(known)) if known else (0.0, 0.0)


def grid(n: int, size: int, points: int = GRID_POINTS) -> list[int]:
    """Evenly spaced start points of slices of `size` among `n`, both ends included."""
    last = n - size
    if last <= 0:
        return [0]
    steps = min(points, last + 1)
    return sorted({round(k * last / (steps - 1)) for k in range(steps)}) if steps > 1 else [0]


def _busiest(columns: Columns, size: int) -> int:
    arrival = columns.arrival
    best, best_span = 0, None
    for start in range(len(arrival) - size + 1):
        span = arrival[start + size - 1] - arrival[start]
        if best_span is None or span < best_span:  # ties: the earliest
            best, best_span = start, span
    return best


def _representative(columns: Columns, size: int, reference: _Reference) -> tuple[int, int]:
    starts = grid(len(columns), size)
    best, best_score = 0, None
    for start in starts:
        end = start + size
        score = _score(reference.distances(columns.arrival[start:end],
                                           columns.input_tokens[start:end],
                                           columns.output_tokens[start:end]))
        if best_score is None or score < best_score:  # ties: the earliest
            best, best_score = start, score
    return best, len(starts)


def choose(columns: Columns, max_requests: int, method: str) -> Selection:
    """The slice of `columns` (more than `max_requests` of them) that `method` keeps."""
    check_method(method)
    n = len(columns)
    size = min(max_requests, n)
    candidates = 1
    if method == "busiest":
        start, candidates = _busiest(columns, size), n - size + 1
    elif method == "representative":
        start, candidates = _representative(columns, size, _Reference(columns))
    else:
        start = 0
    end = start + size
    left_out = frozenset(
        key for key in set(columns.session[start:end]) if key
        and not start <= columns.bounds(key)[0] <= columns.bounds(key)[1] < end)
    skip = 0
    while start - skip > 0 and columns.arrival[start - skip - 1] == columns.arrival[start]:
        skip += 1
    selection = Selection(method, start, end, left_out, candidates, skip)
    if not selection.kept_indices(columns):
        raise InvalidInput(f"Every session in the {method} slice of {size:,} requests continues "
                           "outside it, and a trace never cuts a session: raise max_requests.",
                           field="max_requests")
    return selection


def describe(selection: Selection, columns: Columns, window: Window) -> dict[str, Any]:
    """The `selection` block of the trace: method, the slice's span, what was left out, and the
    kept records' KS distances to the whole window (computed on what the trace holds)."""
    kept = selection.kept_indices(columns)
    arrivals = [columns.arrival[i] for i in kept]
    distances = _Reference(columns).distances(arrivals, [columns.input_tokens[i] for i in kept],
                                              [columns.output_tokens[i] for i in kept])
    traffic_span = columns.arrival[-1] - columns.arrival[0]
    span = arrivals[-1] - arrivals[0]
    in_slice_sessions = {k for k in columns.session[selection.start:selection.end] if k}
    return {
        "method": selection.method,
        "window_requests": len(columns),
        "candidates": selection.candidates,
        "span": {"start": rfc3339(from_epoch_ms(arrivals[0])),
                 "end": rfc3339(from_epoch_ms(arrivals[-1])), "duration_ms": span},
        "coverage": round(span / traffic_span, 6) if traffic_span > 0 else None,
        "sessions_left_out": len(in_slice_sessions & selection.left_out),
        "requests_left_out_for_sessions": selection.end - selection.start - len(kept),
        "ks": {name: None if d is None else round(d, 9) for name, d in distances.items()},
    }


def columns_of(observations: Iterable[StoredObservation]) -> Columns:
    columns = Columns()
    for obs in observations:
        columns.add(obs)
    return columns


def kept(observations: Iterable[StoredObservation], selection: Selection
         ) -> Iterator[StoredObservation]:
    """The slice's observations from a read that begins at the slice's first arrival ms: the
    `skip` observations at that instant that precede the slice are passed over, then the
    slice's observations of sessions left out."""
    for index, obs in enumerate(observations, start=selection.start - selection.skip):
        if index >= selection.end:
            return
        if selection.keeps(index, session_key(obs.session_id)):
            yield obs
