"""Which slice a trace keeps when its window holds more than max_requests (`--select`).

Oracles: `scipy.stats.ks_2samp` for every KS distance, and brute force over the same slices
(written here, from the definitions in docs/trace.md) for the slice each method must choose.
"""

from __future__ import annotations

import io
import itertools
import random
from datetime import UTC, datetime

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ks_2samp

from infercrane.domain.drift import ks_sorted
from infercrane.domain.trace import json_schema
from infercrane.domain.trace_select import choose, columns_of, describe, grid
from infercrane.domain.trace_window import in_memory_trace, stream_window
from infercrane.domain.windows import Window
from infercrane.errors import InvalidInput
from tests.fakes import BASE_MS, observation

WINDOW = Window(BASE_MS, BASE_MS + 3_600_000)
BUILT = datetime(2026, 11, 29, tzinfo=UTC)


def traffic(n: int = 400, seed: int = 7, sessions: bool = False):
    """A window whose shape changes: a quiet start, a burst in the middle, large prompts late."""
    rng = random.Random(seed)
    t, out = BASE_MS, []
    for i in range(n):
        t += rng.randint(1, 40) if n // 3 <= i < n // 2 else rng.randint(200, 2000)
        big = i > 2 * n // 3
        out.append(observation(i, arrival_ms=t, input_tokens=rng.randint(2000, 9000) if big
                               else rng.randint(50, 3000), output_tokens=rng.randint(1, 900),
                               session_id=f"s{i // 4}" if sessions else None))
    return out


def scipy_d(a, b) -> float:
    return float(ks_2samp(a, b, method="asymp").statistic)


def slice_distances(obs, start, size) -> dict[str, float]:
    part = obs[start:start + size]
    gaps = [b.arrival_ms - a.arrival_ms for a, b in itertools.pairwise(obs)]
    part_gaps = [b.arrival_ms - a.arrival_ms for a, b in itertools.pairwise(part)]
    return {"input_tokens": scipy_d([o.input_tokens for o in part], [o.input_tokens for o in obs]),
            "output_tokens": scipy_d([o.output_tokens for o in part],
                                     [o.output_tokens for o in obs]),
            "inter_arrival_ms": scipy_d(part_gaps, gaps)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=60),
       st.lists(st.integers(0, 30), min_size=1, max_size=60))
def test_ks_against_a_sorted_window_equals_scipys_with_ties(whole, sample):
    assert ks_sorted(sorted(whole), sorted(sample)) == pytest.approx(
        scipy_d(sample, whole), abs=1e-12)


def test_head_keeps_the_earliest():
    obs = traffic()
    selection = choose(columns_of(obs), 100, "head")
    assert (selection.start, selection.end, selection.candidates) == (0, 100, 1)


def test_busiest_is_the_slice_with_the_shortest_span_of_all():
    obs = traffic()
    size = 60
    spans = [obs[s + size - 1].arrival_ms - obs[s].arrival_ms for s in range(len(obs) - size + 1)]
    selection = choose(columns_of(obs), size, "busiest")
    assert selection.start == spans.index(min(spans))
    assert n_rate(obs, selection.start, size) > n_rate(obs, 0, size)


def n_rate(obs, start, size) -> float:
    return (size - 1) / (obs[start + size - 1].arrival_ms - obs[start].arrival_ms)


def test_representative_is_the_grid_slice_closest_to_the_window_by_scipys_ks():
    obs = traffic()
    size = 100
    starts = grid(len(obs), size)
    assert starts[0] == 0 and starts[-1] == len(obs) - size
    scores = [max(slice_distances(obs, s, size).values()) for s in starts]
    selection = choose(columns_of(obs), size, "representative")
    assert scores[starts.index(selection.start)] == pytest.approx(min(scores), abs=1e-12)
    # The head (quiet, small prompts) is further from the window than the chosen slice.
    assert min(scores) < max(slice_distances(obs, 0, size).values())


@pytest.mark.parametrize("method", ["head", "busiest", "representative"])
def test_the_document_records_the_selection_with_scipys_distances(method):
    obs = traffic()
    document = in_memory_trace(obs, deployment="coder", window=WINDOW, max_requests=100,
                               select=method, built_at=BUILT, request_id=None, software=None).document
    jsonschema.validate(document, json_schema())
    selection = document["selection"]
    chosen = choose(columns_of(obs), 100, method)
    assert document["truncated"] is True and document["sample_count"] == 100
    assert selection["method"] == method and selection["window_requests"] == len(obs)
    want = slice_distances(obs, chosen.start, 100)
    assert selection["ks"] == pytest.approx(want, abs=1e-9)
    first, last = obs[chosen.start], obs[chosen.end - 1]
    assert selection["span"]["duration_ms"] == last.arrival_ms - first.arrival_ms
    assert selection["coverage"] == pytest.approx(
        (last.arrival_ms - first.arrival_ms) / (obs[-1].arrival_ms - obs[0].arrival_ms),
        abs=1e-6)
    assert document["records"][0]["offset_ms"] == first.arrival_ms - WINDOW.start_ms


def test_a_window_within_the_maximum_has_no_selection_field():
    # Its document, and so its digest, is what it was before selection existed.
    obs = traffic(50)
    document = in_memory_trace(obs, deployment="coder", window=WINDOW, max_requests=50,
                               select="busiest", built_at=BUILT, request_id=None,
                               software=None).document
    assert "selection" not in document and document["truncated"] is False


@pytest.mark.parametrize("method", ["head", "busiest", "representative"])
def test_a_slice_never_cuts_a_session_and_counts_those_left_out(method):
    obs = traffic(sessions=True)  # sessions of 4 consecutive turns
    document = in_memory_trace(obs, deployment="coder", window=WINDOW, max_requests=98,
                               select=method, built_at=BUILT, request_id=None, software=None).document
    turns: dict[str, int] = {}
    for r in document["records"]:
        turns[r["session_id"]] = turns.get(r["session_id"], 0) + 1
    assert set(turns.values()) == {4}  # every kept session whole, from its first turn
    selection = document["selection"]
    chosen = choose(columns_of(obs), 98, method)
    in_slice = {o.session_id for o in obs[chosen.start:chosen.end]}
    assert selection["sessions_left_out"] == len(in_slice) - len(turns)
    assert selection["requests_left_out_for_sessions"] == 98 - document["sample_count"]
    assert 0 < selection["sessions_left_out"] <= 2  # a slice of 98 cuts at most its two ends


def test_a_slice_that_would_hold_only_cut_sessions_is_refused():
    obs = [observation(i, session_id=f"s{i % 2}") for i in range(20)]  # two window-long sessions
    with pytest.raises(InvalidInput) as refused:
        choose(columns_of(obs), 5, "head")
    assert refused.value.field == "max_requests"


def test_an_unknown_method_is_refused():
    with pytest.raises(InvalidInput) as refused:
        choose(columns_of(traffic(20)), 5, "middle")
    assert refused.value.field == "select"


class TwoReads:
    """A reader over a sorted list, counting what each read returned (a Query by time)."""

    def __init__(self, obs):
        self.obs = sorted(obs, key=lambda o: (o.arrival_ms, o.observation_id))
        self.reads: list[int] = []

    def __call__(self, start_ms, limit, decided=None):
        found = [o for o in self.obs if o.arrival_ms >= start_ms][:limit]
        self.reads.append(len(found))
        return iter(found)


@pytest.mark.parametrize("method", ["head", "busiest", "representative"])
def test_the_streamed_build_keeps_the_same_slice_and_reads_only_it_again(method):
    # Ties at the slice's first instant: the second read starts by time and must skip them.
    obs = [observation(i, arrival_ms=BASE_MS + 1000 * (i // 3), session_id=f"s{i // 6}",
                       input_tokens=100 + (i * 37) % 500) for i in range(300)]
    in_memory = in_memory_trace(obs, deployment="coder", window=WINDOW, max_requests=50,
                                select=method, built_at=BUILT, request_id=None,
                                software=None).document
    reader = TwoReads(obs)
    result = stream_window(reader, io.BytesIO(), deployment="coder", window=WINDOW,
                           max_requests=50, select=method, progress=lambda n: None,
                           built_at=lambda: BUILT, request_id=None, software=None)
    assert result is not None
    assert result.digest == in_memory["digest"]
    assert result.header["selection"] == in_memory["selection"]
    assert reader.reads[0] == 300 and reader.reads[1] <= 50 + 2


def test_describe_names_the_selection_of_the_slice_it_is_given():
    obs = traffic(120)
    columns = columns_of(obs)
    described = describe(choose(columns, 30, "busiest"), columns, WINDOW)
    assert described["method"] == "busiest" and described["candidates"] == 91
