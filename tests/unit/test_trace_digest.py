"""The trace digest: the same evidence gives the same digest anywhere; any change changes it."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from dataclasses import fields
from datetime import UTC, datetime

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain.digest import compute_digest, normalize_digest, verify_digest
from infercrane.domain.replay import TraceService
from infercrane.domain.trace import build_trace
from infercrane.domain.windows import Window
from infercrane.errors import InvalidInput
from tests.conftest import REPO
from tests.fakes import (
    BASE_MS,
    FakeDocumentStore,
    FakeObservationStore,
    FakeTraceStore,
    local_signer,
    observation,
    with_changes,
)

WINDOW = Window(BASE_MS, BASE_MS + 3_600_000)
BUILT = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


def sample(n=40):
    return [observation(i, session_id=f"v1:{i // 5:064x}", prefix_block_ids=(
        f"v1:{0:064x}", f"v1:{i:064x}"), prefix_block_size=512) for i in range(n)]


def build(observations, **kw):
    return build_trace(deployment="coder", window=WINDOW, max_requests=1000,
                       observations=observations, truncated=False, built_at=BUILT, **kw)


def digest_via_store(observations, batch, insertion_seed):
    store = FakeObservationStore()
    shuffled = list(observations)
    random.Random(insertion_seed).shuffle(shuffled)
    for i in range(0, len(shuffled), batch):
        store.put_many(shuffled[i:i + batch])
    service = TraceService(store, FakeTraceStore(), FakeDocumentStore(), signer=local_signer())
    return service.build_document("demo", "coder", "1h", datetime.fromtimestamp(
        WINDOW.end_ms / 1000, UTC), 25, BUILT)["digest"]


def test_digest_is_sha256_of_the_rfc8785_form_without_digest_and_build():
    document = build(sample())
    content = {k: v for k, v in document.items() if k not in ("digest", "build")}
    assert document["digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(content)).hexdigest()


@pytest.mark.parametrize("batch", [1, 7, 500])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_digest_whatever_the_insertion_order_and_batches(batch, seed):
    observations = sample()
    assert digest_via_store(observations, batch, seed) == digest_via_store(observations, 500, 99)


def test_volatile_build_fields_do_not_change_the_digest():
    a = build(sample(), request_id="req-1", software="infercrane 0.1.0")
    b = build_trace(deployment="coder", window=WINDOW, max_requests=1000, observations=sample(),
                    truncated=False, built_at=datetime(2030, 1, 1, tzinfo=UTC), request_id="other")
    assert a["build"] != b["build"]
    assert a["digest"] == b["digest"]


CHANGES = {
    "arrival_ms": BASE_MS + 7, "input_tokens": 99_999, "output_tokens": 99_999,
    "cached_input_tokens": 3, "ttft_ms": 41.0, "latency_ms": 251.25, "outcome": "timeout",
    "streaming": False, "sampling_rate": 0.5, "source": "imported", "timing_source": "modeled",
    "timing_model": '{"kind":"linear"}', "revision": "r2", "session_id": "v1:" + "f" * 64,
    "parent_session_id": "v1:" + "e" * 64, "shared_prefix_id": "v1:" + "d" * 64,
    "prefix_block_ids": ("v1:" + "c" * 64,), "prefix_block_size": 16, "key_version": "v2",
    "provenance": "mooncake-jsonl:sha256:" + "b" * 64,
}
# Fields that are not evidence: where the record sits in storage, and when it was ingested.
NOT_EVIDENCE = {"tenant", "deployment", "observation_id", "ingested_at_ms", "fingerprint"}


def test_every_evidence_field_of_an_observation_is_covered_by_a_change_below():
    assert {f.name for f in fields(observation())} - NOT_EVIDENCE == set(CHANGES)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_any_change_to_a_record_changes_the_digest(name):
    observations = sample(5)
    changed = list(observations)
    changed[3] = with_changes(changed[3], **{name: CHANGES[name]})
    assert build(changed)["digest"] != build(observations)["digest"]


def test_any_re_serialization_still_verifies_and_a_changed_value_fails():
    document = build(sample())
    reformatted = json.loads(json.dumps(json.loads(json.dumps(document, indent=3,
                                                              sort_keys=True)), ensure_ascii=True))
    reformatted["records"][0]["latency_ms"] = int(reformatted["records"][0]["latency_ms"])
    assert verify_digest(reformatted)[0]
    reformatted["records"][0]["output_tokens"] += 1
    ok, recomputed = verify_digest(reformatted)
    assert not ok
    assert recomputed != document["digest"]


_CHILD = """
import json, sys
from datetime import UTC, datetime
sys.path[:0] = [{repo!r}, {repo!r} + "/shared"]  # this checkout's package, not an install
from tests.unit.test_trace_digest import build, sample
print(build(sample())["digest"])
"""


def test_same_digest_in_two_other_processes():
    digests = set()
    for seed in ("1", "4242"):
        done = subprocess.run([sys.executable, "-c", _CHILD.format(repo=str(REPO))], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=True,
                              env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        digests.add(done.stdout.strip())
    assert digests == {build(sample())["digest"]}


observations_strategy = st.lists(
    st.builds(lambda i, t, inp, out, lat: observation(i, arrival_ms=BASE_MS + t, input_tokens=inp,
                                                      output_tokens=out, latency_ms=lat),
              st.integers(0, 10**6), st.integers(0, 3_599_999), st.integers(0, 10**6),
              st.integers(0, 10**5), st.floats(0, 1e6, allow_nan=False)),
    max_size=30, unique_by=lambda o: o.observation_id)


@settings(max_examples=60, deadline=None)
@given(observations_strategy, st.randoms(use_true_random=False))
def test_digest_ignores_the_order_observations_arrive_in(observations, rnd):
    shuffled = list(observations)
    rnd.shuffle(shuffled)
    assert build(shuffled)["digest"] == build(observations)["digest"]
    assert verify_digest(json.loads(json.dumps(build(shuffled))))[0]


def test_digests_are_normalized_and_bad_ones_refused():
    hexed = "A" * 64
    assert normalize_digest(hexed) == "sha256:" + "a" * 64
    assert normalize_digest("sha256:" + hexed) == "sha256:" + "a" * 64
    for bad in ("sha256:xyz", "md5:" + "a" * 64, ""):
        with pytest.raises(InvalidInput) as info:
            normalize_digest(bad)
        assert info.value.field == "digest"


def test_compute_digest_does_not_depend_on_key_order():
    document = build(sample(3))
    reordered = dict(reversed(list(document.items())))
    assert compute_digest(reordered) == document["digest"]
