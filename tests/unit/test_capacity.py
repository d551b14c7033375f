"""Capacity intelligence domain: validation, ingest idempotency, rollups, reports (no I/O)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from ddsketch import DDSketch
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain import capacity_synth
from infercrane.domain.capacity import (
    EXACT_IN_REPORT,
    MIN_N_P50,
    MIN_N_P95,
    RELATIVE_ACCURACY,
    CapacityService,
    DurationMerge,
    DurationSummary,
)
from infercrane.domain.classifier import classify
from infercrane.errors import InvalidInput, PayloadTooLarge
from tests.support.capacity_memory import MemoryCapacityStore

END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=5)


def attempt(**over):
    doc = {"attempt_id": "a-1", "deployment": "coder", "operation": "create", "adapter": "aws",
           "runtime": "vllm", "compute_mode": "spot", "region": "us-east-1", "zone": "us-east-1a",
           "gpu": "H100", "gpu_count": 8, "started_at": "2026-11-28T10:00:00.000Z",
           "finished_at": "2026-11-28T10:04:00.000Z", "outcome": "succeeded"}
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not None}


def service(store=None):
    return CapacityService(store or MemoryCapacityStore())


def load(svc, tenant, items):
    for batch in capacity_synth.batches(items):
        result = svc.ingest(tenant, batch, NOW)
        assert result.rejected == 0, result.errors[:3]


# -- validation and ingest ---------------------------------------------------------------------
# The codes are domain/batch.py's, the same capture's items get (written out here, the oracle).
@pytest.mark.parametrize(("over", "field", "code"), [
    ({"attempt_id": None}, "attempt_id", "missing"),
    ({"attempt_id": "has space"}, "attempt_id", "invalid_format"),
    ({"adapter": "azure"}, "adapter", "invalid_format"),
    ({"outcome": "exploded"}, "outcome", "invalid_format"),
    ({"gpu_count": -1}, "gpu_count", "out_of_range"),
    ({"gpu_count": [8]}, "gpu_count", "invalid_type"),
    ({"started_at": "yesterday"}, "started_at", "invalid_format"),
    ({"started_at": "2026-11-28T10:00:00"}, "started_at", "invalid_format"),
    ({"finished_at": "2026-11-28T09:00:00.000Z"}, "finished_at", "out_of_range"),
    ({"started_at": "2027-01-01T00:00:00Z", "finished_at": "2027-01-01T00:01:00Z"}, "started_at",
     "out_of_range"),
    ({"region": "us#east"}, "region", "invalid_format"),
    ({"surplus": "hello"}, None, "unknown_field"),  # an unknown key is located by its parent
    ({"prompt": "hello"}, "prompt", "body_field_refused"),  # a body key, in our spelling
    ({"finished_at": None}, "finished_at", "missing"),
])
def test_ingest_rejects_an_invalid_item_naming_its_field_without_echoing_it(over, field, code):
    result = service().ingest("acme", [attempt(attempt_id="ok-1"), attempt(**over)], NOW)
    assert (result.accepted, result.rejected) == (1, 1)
    err = result.errors[0]
    assert (err.index, err.field, err.code) == (1, field, code)
    for value in over.values():
        if isinstance(value, str):
            assert value not in err.message


def test_ingest_refuses_a_batch_over_500_and_a_non_list():
    with pytest.raises(PayloadTooLarge) as too_big:
        service().ingest("acme", [attempt(attempt_id=f"a{i}") for i in range(501)], NOW)
    assert too_big.value.field == "items"
    with pytest.raises(InvalidInput):
        service().ingest("acme", {"attempt_id": "x"}, NOW)


def test_resending_an_attempt_id_is_accepted_and_changes_nothing():
    store = MemoryCapacityStore()
    svc = service(store)
    first = svc.ingest("acme", [attempt(outcome="failed", error_code="VcpuLimitExceeded")], NOW)
    again = svc.ingest("acme", [attempt(outcome="succeeded")], NOW)
    assert (first.accepted, first.new, again.accepted, again.new) == (1, 1, 1, 0)
    (stored,) = store.attempts.values()
    assert (stored.outcome, stored.failure_class) == ("failed", "quota")
    report = svc.report("acme", "720h", END, None, NOW)
    assert [g["samples"] for g in report["groups"]] == [1]


def test_failed_attempts_keep_raw_code_message_and_classifier_version():
    store = MemoryCapacityStore()
    service(store).ingest("acme", [attempt(outcome="failed", error_code="Unsupported",
                                           error_message="not supported in your AZ")], NOW)
    (stored,) = store.attempts.values()
    assert stored.error_code == "Unsupported"
    assert stored.error_message == "not supported in your AZ"
    assert (stored.failure_class, stored.persistent) == ("capacity", True)
    assert stored.classifier_version
    assert stored.rule


# -- durations -----------------------------------------------------------------------------------
def test_duration_sketch_matches_ddsketch_and_stays_within_its_relative_error():
    rng = random.Random(7)
    values = [max(1, int(rng.lognormvariate(11, 1.2))) for _ in range(5000)]
    ours, theirs = DurationSummary(), DDSketch(RELATIVE_ACCURACY)
    for v in values:
        ours.add(v)
        theirs.add(v)
    ours.to_sketch()
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.95, 0.99):
        exact = ordered[int(q * (len(values) - 1))]
        estimate = ours.quantile_ms(q)
        assert abs(estimate - exact) <= RELATIVE_ACCURACY * exact
        assert estimate == pytest.approx(theirs.get_quantile_value(q), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10**7), max_size=80), min_size=1, max_size=6),
       st.permutations(range(6)))
def test_duration_summaries_merge_in_any_order_to_the_same_result(parts, order):
    def merged(indices):
        out = DurationMerge()
        for i in indices:
            if i < len(parts):
                d = DurationSummary()
                for v in parts[i]:
                    d.add(v)
                out.add_hour(DurationSummary.from_document(d.compact(16).to_document()))
        return out.finish(EXACT_IN_REPORT)

    a, b = merged(range(6)), merged(order)
    assert a.n == b.n == sum(len(p) for p in parts)
    for q in (0.5, 0.95):
        assert a.quantile_ms(q) == b.quantile_ms(q)


# -- ground truth --------------------------------------------------------------------------------
def assert_matches_truth(report, synth):
    groups = {(g["adapter"], g["runtime"], g["compute_mode"], g["region"], g["gpu"]): g
              for g in report["groups"]}
    assert set(groups) == {k for k, t in synth.truth.items() if t.samples}
    for key, truth in synth.truth.items():
        if not truth.samples:
            continue
        g = groups[key]
        assert (g["samples"], g["succeeded"], g["failed"], g["cancelled"]) == (
            truth.samples, truth.succeeded, truth.failed, truth.cancelled)
        assert g["success_rate"] == round(truth.succeeded / (truth.succeeded + truth.failed), 6)
        assert {k: v for k, v in g["failures"].items() if v} == truth.failures
        assert g["capacity_structural"] == truth.structural
        assert g["duration_samples"] == len(truth.durations_ms)
        for q, name, least in ((0.5, "p50_duration_s", MIN_N_P50), (0.95, "p95_duration_s", MIN_N_P95)):
            if len(truth.durations_ms) < least:
                assert g[name] is None
                assert g[name.replace("duration_s", "null_reason")]
                continue
            exact_s = truth.quantile_ms(q) / 1000
            if g["duration_method"] == "exact":
                assert g[name] == round(exact_s, 3)
            else:
                assert abs(g[name] - exact_s) <= RELATIVE_ACCURACY * exact_s + 0.0005


def test_ten_thousand_attempts_report_exact_counts_and_percentiles_within_the_stated_error():
    synth = capacity_synth.generate(10_000, seed=11, end=END)
    svc = service()
    load(svc, "acme", synth.attempts)
    before = svc.report("acme", "720h", END, None, NOW)  # all tail: nothing rolled up yet
    assert before["read"]["tail_hours"] == 720
    assert before["read"]["rollup_items"] == 0
    assert_matches_truth(before, synth)
    result = svc.aggregate(NOW)
    assert (result.hours, result.attempts, result.still_dirty) == (720, 10_000, 0)
    after = svc.report("acme", "720h", END, None, NOW)
    assert after["read"] == {"rollup_items": 30, "day_items": 30, "tail_hours": 0,
                             "tail_attempts": 0}
    assert after["groups"] == before["groups"]
    assert_matches_truth(after, synth)
    assert after["scope"] == "tenant-observed"


def test_large_groups_switch_to_the_sketch_and_stay_within_its_error():
    synth = capacity_synth.generate(30_000, seed=5, end=END)
    svc = service()
    load(svc, "acme", synth.attempts)
    svc.aggregate(NOW)
    report = svc.report("acme", "720h", END, None, NOW)
    assert {g["duration_method"] for g in report["groups"]} == {"ddsketch"}
    assert all(g["duration_samples"] > EXACT_IN_REPORT for g in report["groups"])
    assert_matches_truth(report, synth)


def test_a_ten_times_larger_set_reads_no_more_rollup_items():
    reads = {}
    for n in (2_000, 20_000):
        store = MemoryCapacityStore()
        svc = service(store)
        load(svc, "acme", capacity_synth.generate(n, seed=3, end=END).attempts)
        svc.aggregate(NOW)
        store.rollup_reads = store.attempt_reads = 0
        report = svc.report("acme", "720h", END, None, NOW)
        assert store.attempt_reads == 0
        reads[n] = store.rollup_reads
        assert report["read"]["rollup_items"] == store.rollup_reads
    assert reads[20_000] <= reads[2_000] == 30  # one day rollup a day


def test_group_by_coarsens_and_nulls_the_grouped_away_dimensions():
    synth = capacity_synth.generate(3_000, seed=2, end=END)
    svc = service()
    load(svc, "acme", synth.attempts)
    svc.aggregate(NOW)
    report = svc.report("acme", "720h", END, "gpu,adapter", NOW)
    assert report["group_by"] == ["adapter", "gpu"]
    assert len(report["groups"]) == 6
    for g in report["groups"]:
        assert g["runtime"] is None
        assert g["compute_mode"] is None
        assert g["region"] is None
        expected = sum(t.samples for k, t in synth.truth.items()
                       if (k[0], k[4]) == (g["adapter"], g["gpu"]))
        assert g["samples"] == expected
    samples = [g["samples"] for g in report["groups"]]
    assert samples == sorted(samples, reverse=True)


@pytest.mark.parametrize(("window", "group_by", "field"), [
    ("30m", None, "window"), ("soon", None, "window"), ("720h", "zone", "group_by"),
    ("720h", "gpu,gpu", "group_by"),
])
def test_report_rejects_bad_windows_and_dimensions(window, group_by, field):
    with pytest.raises(InvalidInput) as err:
        service().report("acme", window, END, group_by, NOW)
    assert err.value.field == field


def test_small_groups_report_null_percentiles_with_a_reason():
    svc = service()
    svc.ingest("acme", [attempt(attempt_id=f"a{i}") for i in range(7)], NOW)
    (g,) = svc.report("acme", "720h", END, None, NOW)["groups"]
    assert g["p50_duration_s"] == 240.0
    assert g["p95_duration_s"] is None
    assert "n=7 < 20" in g["p95_null_reason"]


def test_quota_failures_never_count_as_capacity_and_dominance_is_flagged():
    svc = service()
    svc.ingest("acme", [
        attempt(attempt_id="q1", outcome="failed", error_code="VcpuLimitExceeded"),
        attempt(attempt_id="q2", outcome="failed", error_code="InsufficientInstanceCapacity"),
        attempt(attempt_id="q3", outcome="failed", error_code="InsufficientInstanceCapacity"),
        attempt(attempt_id="q4", gpu="L4", outcome="failed", error_code="VcpuLimitExceeded"),
    ], NOW)
    groups = {g["gpu"]: g for g in svc.report("acme", "720h", END, None, NOW)["groups"]}
    assert groups["H100"]["failures"]["capacity"] == 2
    assert groups["H100"]["failures"]["quota"] == 1
    assert groups["H100"]["capacity_dominant"] is True
    assert groups["L4"]["failures"]["capacity"] == 0
    assert groups["L4"]["capacity_dominant"] is False


# -- late arrivals, re-classification, tenancy ---------------------------------------------------
def test_late_arrivals_fold_into_their_hour_and_show_before_the_next_rollup():
    store = MemoryCapacityStore()
    svc = service(store)
    synth = capacity_synth.generate(2_000, seed=9, end=END)
    load(svc, "acme", synth.attempts)
    svc.aggregate(NOW)
    late = [attempt(attempt_id=f"late-{i}", started_at="2026-11-10T03:15:00Z",
                    finished_at="2026-11-10T03:20:00Z") for i in range(3)]
    svc.ingest("acme", late, NOW)
    tail = svc.report("acme", "720h", END, "adapter", NOW)
    assert tail["read"]["tail_hours"] == 1
    assert sum(g["samples"] for g in tail["groups"]) == 2_003
    svc.aggregate(NOW)
    rolled = svc.report("acme", "720h", END, "adapter", NOW)
    assert rolled["read"] == {"rollup_items": 30, "day_items": 30, "tail_hours": 0,
                              "tail_attempts": 0}
    assert rolled["groups"] == tail["groups"]


def test_a_new_classifier_version_reclassifies_history():
    store = MemoryCapacityStore()

    def old_rules(provider, code, message):
        return classify(provider, "SomethingNew" if code == "VcpuLimitExceeded" else code, message)

    old = CapacityService(store, classify=old_rules, version="v-old")
    old.ingest("acme", [attempt(outcome="failed", error_code="VcpuLimitExceeded")], NOW)
    old.aggregate(NOW)
    assert old.report("acme", "720h", END, None, NOW)["groups"][0]["failures"]["unknown"] == 1

    new = CapacityService(store, version="v-new", previous_versions=["v-old"])
    # The report already answers with the new rules (stale hours are read as tail)...
    fresh = new.report("acme", "720h", END, None, NOW)
    assert fresh["groups"][0]["failures"]["quota"] == 1
    assert fresh["read"]["tail_hours"] == 1
    # ...and the aggregator rewrites rollups and attempts.
    result = new.aggregate(NOW)
    assert (result.stale_marked, result.reclassified) == (1, 1)
    (stored,) = store.attempts.values()
    assert (stored.failure_class, stored.classifier_version) == ("quota", "v-new")
    assert store.rollups_of_version("v-old", 10) == []
    assert new.report("acme", "720h", END, None, NOW)["read"]["tail_hours"] == 0


def test_another_tenants_attempts_never_appear_in_or_change_a_report():
    store = MemoryCapacityStore()
    svc = service(store)
    load(svc, "acme", capacity_synth.generate(1_500, seed=1, end=END).attempts)
    svc.aggregate(NOW)
    alone = svc.report("acme", "720h", END, None, NOW)
    other = capacity_synth.generate(1_500, seed=1, end=END).attempts  # the same attempt ids
    for a in other:
        a["gpu"] = "B200"
    load(svc, "globex", other)
    assert svc.report("acme", "720h", END, None, NOW) == alone
    svc.aggregate(NOW)
    assert svc.report("acme", "720h", END, None, NOW) == alone
    theirs = svc.report("globex", "720h", END, None, NOW)
    assert {g["gpu"] for g in theirs["groups"]} == {"B200"}


# -- control-plane events (the detail of each; the handler unwraps EventBridge's envelope) --------
def test_control_plane_event_ingests_for_the_tenant_it_names():
    store = MemoryCapacityStore()
    result = service(store).ingest_control_plane({"tenant": "acme", "items": [attempt()]}, NOW,
                                                 lambda t: t == "acme")
    assert (result["accepted"], result["dropped"]) == (1, 0)
    assert [k[0] for k in store.attempts] == ["acme"]


@pytest.mark.parametrize("detail", [
    {"tenant": "ghost", "items": [attempt()]},
    {"tenant": "ACME!", "items": [attempt()]},
    {"items": [attempt()]},
    {"tenant": "acme", "items": "nope"},
    {"tenant": "acme", "items": [attempt()], "extra": 1},
    "not an object",
])
def test_malformed_or_foreign_control_plane_events_are_dropped_not_stored(detail):
    store = MemoryCapacityStore()
    result = service(store).ingest_control_plane(detail, NOW, lambda t: t == "acme")
    assert result["dropped"] == 1
    assert store.attempts == {}


def _directory_down(tenant):
    from infercrane.errors import DependencyUnavailable

    raise DependencyUnavailable("The directory is unavailable.")


def test_an_event_with_an_invalid_item_is_checked_before_any_dependency_and_never_retried():
    store = MemoryCapacityStore()
    bad = {**attempt(attempt_id="bad"), "prompt": "CANARY-lifecycle"}
    result = service(store).ingest_control_plane({"tenant": "acme", "items": [attempt(), bad]},
                                                 NOW, _directory_down)
    assert (result["dropped"], result["reason"]) == (1, "dependency_unavailable")
    assert store.attempts == {}


def test_a_fully_valid_event_is_retried_when_a_dependency_is_down():
    from infercrane.errors import DependencyUnavailable

    with pytest.raises(DependencyUnavailable):
        service(MemoryCapacityStore()).ingest_control_plane(
            {"tenant": "acme", "items": [attempt()]}, NOW, _directory_down)


def test_a_deeply_nested_event_item_is_dropped_not_raised():
    deep: object = "x"
    for _ in range(5000):
        deep = [deep]
    store = MemoryCapacityStore()
    result = service(store).ingest_control_plane(
        {"tenant": "acme", "items": [{**attempt(), "error_message": deep}]}, NOW,
        _directory_down)
    assert result["dropped"] == 1
    assert store.attempts == {}
