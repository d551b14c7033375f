"""Each qualification row fails when its promise is broken in a test double, and passes with an
honest one: the suite's checks take their dependencies as parameters, so no stack is needed."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

from infercrane.qualify import (
    aggregation,
    capture_privacy,
    delegated_prefetch,
    deterministic_digests,
    tenancy,
)
from infercrane.qualify.core import PromiseResult, guarded
from infercrane.qualify.evidence import evidence_document, verify
from infercrane.qualify.target import Reply

PLACES = ["dynamodb:ObservationsTable", "logs:stack", "sqs:CaptureDLQ", "http:responses"]


def _clean_texts() -> dict[str, list[str]]:
    return {p: ['{"pk": {"S": "demo#dep"}, "session_id": {"S": "v1:ab12"}}'] for p in PLACES}


# -- capture privacy -----------------------------------------------------------------------------
def test_capture_row_passes_when_no_canary_is_stored():
    canaries = capture_privacy.make_canaries("t0")
    result = PromiseResult("capture privacy")
    capture_privacy.scan_for_canaries(_clean_texts(), PLACES, canaries, result)
    assert result.ok
    assert len(result.checks) == len(PLACES) * sum(map(len, canaries.values()))


def test_capture_row_fails_when_an_adapter_stores_a_raw_session_id():
    canaries = capture_privacy.make_canaries("t1")
    texts = _clean_texts()
    raw = canaries["rest"]["session_id"]
    texts["dynamodb:ObservationsTable"].append(json.dumps({"session_id": {"S": raw}}))
    result = PromiseResult("capture privacy")
    capture_privacy.scan_for_canaries(texts, PLACES, canaries, result)
    assert not result.ok
    assert [c.name for c in result.failures()] == ["rest x session_id x dynamodb:ObservationsTable"]


def test_capture_row_fails_when_a_log_line_carries_a_body_base64_encoded():
    canaries = capture_privacy.make_canaries("t2")
    texts = _clean_texts()
    leaked = base64.b64encode(b'{"prompt": "' + canaries["rest"]["body_prompt"].encode() + b'"}')
    texts["logs:stack"].append("DEBUG event body=" + leaked.decode())
    result = PromiseResult("capture privacy")
    capture_privacy.scan_for_canaries(texts, PLACES, canaries, result)
    assert [c.name for c in result.failures()] == ["rest x body_prompt x logs:stack"]


def test_capture_row_fails_when_a_storage_place_cannot_be_read():
    texts = _clean_texts()
    del texts["logs:stack"]
    result = PromiseResult("capture privacy")
    capture_privacy.scan_for_canaries(texts, PLACES, capture_privacy.make_canaries("t3"), result)
    assert not result.ok
    assert all(c.detail == "place not readable" for c in result.failures())


def test_capture_scanner_must_see_the_control_value():
    result = PromiseResult("capture privacy")
    capture_privacy.check_scanner_sees({"dynamodb:ObservationsTable": []}, "qualcap-x-rest", result)
    assert not result.ok


def test_capture_row_fails_when_pseudonyms_are_not_hmac_sha256():
    import hashlib

    from infercrane.domain.identity import pseudonymize

    honest = PromiseResult("capture privacy")
    capture_privacy.check_hmac_vectors(pseudonymize, honest)
    assert honest.ok

    def plain_hash(raw: str, keys: Any, version: str | None = None) -> str:
        return "v1:" + hashlib.sha256(keys.key() + raw.encode()).hexdigest()

    broken = PromiseResult("capture privacy")
    capture_privacy.check_hmac_vectors(plain_hash, broken)
    assert [c.name for c in broken.failures()] == ["identity HMAC: RFC 4231 case 1",
                                                   "identity HMAC: RFC 4231 case 2"]


# -- deterministic digests -------------------------------------------------------------------------
def _doc() -> dict[str, Any]:
    doc = {"schema": "infercrane.replay.trace/v1", "records": [{"output_tokens": 1}, {"output_tokens": 2}],
           "build": {"built_at": "2026-11-29T00:00:00.000Z"}}
    doc["digest"] = deterministic_digests.document_digest(doc)
    return doc


def test_digest_row_fails_when_batching_or_a_re_send_changes_the_digest():
    result = PromiseResult("deterministic digests")
    deterministic_digests.check_batches({1: "sha256:b", 7: "sha256:c", 500: "sha256:a"},
                                        "sha256:a", result)
    assert [c.name for c in result.failures()] == [
        "batches of 1: same digest", "batches of 7, each batch sent twice: same digest"]


def test_digest_row_fails_when_a_batching_could_not_be_built():
    result = PromiseResult("deterministic digests")
    deterministic_digests.check_batches({1: "sha256:a", 7: "sha256:a", 500: None}, "sha256:a",
                                        result)
    assert [c.name for c in result.failures()] == ["batches of 500: same digest"]


def test_digest_row_fails_when_verify_accepts_a_changed_record():
    def lenient_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(args), 0, "ok", "")

    result = PromiseResult("deterministic digests")
    deterministic_digests.check_verify(lenient_cli, _doc(), result)
    assert [c.name for c in result.failures()] == ["trace verify: a changed record fails"]


def test_digest_row_passes_with_a_verifier_that_recomputes():
    def honest_cli(*args: str) -> subprocess.CompletedProcess[str]:
        with open(args[-1]) as f:
            doc = json.load(f)
        ok = deterministic_digests.document_digest(doc) == doc["digest"]
        return subprocess.CompletedProcess(list(args), 0 if ok else 5, "", "")

    result = PromiseResult("deterministic digests")
    deterministic_digests.check_verify(honest_cli, _doc(), result)
    assert result.ok


def test_digest_row_fails_when_verify_reports_a_change_as_a_service_failure():
    def confused_cli(*args: str) -> subprocess.CompletedProcess[str]:
        with open(args[-1]) as f:
            doc = json.load(f)
        ok = deterministic_digests.document_digest(doc) == doc["digest"]
        return subprocess.CompletedProcess(list(args), 0 if ok else 1, "", "")

    result = PromiseResult("deterministic digests")
    deterministic_digests.check_verify(confused_cli, _doc(), result)
    assert [c.name for c in result.failures()] == ["trace verify: a changed record fails"]


def test_fixed_window_is_the_same_in_every_process_and_changes_with_a_record():
    a = deterministic_digests.fixed_observations("d")
    assert a == deterministic_digests.fixed_observations("d")
    assert len({o["observation_id"] for o in a}) == deterministic_digests.RECORDS


# -- tenancy ------------------------------------------------------------------------------------
ROUTE = tenancy.Route("GET", "/v1/traces/{digest}")
VALUES = {**tenancy.PLACEHOLDER, "digest": "sha256:" + "1" * 64}
KEYS = {"no key": None, "unknown key": "u", "revoked key": "r", "other tenant's key": "o"}


def _gateway(revoked_status: int = 401, other: Reply | None = None):
    def send(method: str, path: str, key: str | None, body: Any) -> Reply:
        if key == "r":
            return Reply(revoked_status, '{"traces": []}' if revoked_status == 200 else
                         '{"error": {"code": "unauthorized"}}')
        if key == "o":
            return other or Reply(404, '{"error": {"code": "not_found"}}')
        return Reply(401, '{"error": {"code": "unauthorized"}}')
    return send


def _run_route(send, state=lambda: ("same", "same")) -> PromiseResult:
    result = PromiseResult("tenancy")
    tenancy.check_route(ROUTE, VALUES, KEYS, send, state, result, ["digest"])
    return result


def test_tenancy_row_passes_when_every_credential_is_refused():
    assert _run_route(_gateway()).ok


def test_tenancy_row_fails_when_a_revoked_key_is_still_accepted():
    failed = [c.name for c in _run_route(_gateway(revoked_status=200)).failures()]
    assert failed == ["GET /v1/traces/{digest} x revoked key → 401"]


def test_tenancy_row_fails_when_another_tenant_reads_the_owners_trace():
    leak = Reply(200, json.dumps({"digest": VALUES["digest"]}))
    failed = [c.name for c in _run_route(_gateway(other=leak)).failures()]
    assert failed == ["GET /v1/traces/{digest} x other tenant's key → not found / not shown"]


def test_tenancy_row_fails_when_another_tenant_changes_the_owners_data():
    counter = iter(range(100))
    result = _run_route(_gateway(), state=lambda: ("same", str(next(counter))))
    assert [c.name for c in result.failures()] == [
        "GET /v1/traces/{digest} x other tenant's key → owner's data unchanged"]


def test_tenancy_row_fails_when_a_refused_request_still_writes():
    counter = iter(range(100))
    result = _run_route(_gateway(), state=lambda: (str(next(counter)), "owner"))
    assert [c.name for c in result.failures()] == [
        "GET /v1/traces/{digest} x refused credentials → nothing stored or changed"]


# -- aggregation ------------------------------------------------------------------------------------
def _honest_report(truth, quota_as_capacity: bool = False, p95_factor: float = 1.0) -> dict[str, Any]:
    groups = []
    for dims, t in truth.items():
        s = sorted(t.durations_ms)
        n = len(s)
        decided = t.succeeded + t.failed
        groups.append({
            **dict(zip(aggregation.DIMS, dims, strict=True)), "samples": t.samples,
            "succeeded": t.succeeded, "failed": t.failed, "cancelled": t.cancelled,
            "success_rate": round(t.succeeded / decided, 6) if decided else None,
            "failures": {"capacity": t.capacity + (t.quota if quota_as_capacity else 0),
                         "quota": 0 if quota_as_capacity else t.quota},
            "p50_duration_s": s[int(0.5 * (n - 1))] / 1000 if n >= 5 else None,
            "p95_duration_s": s[int(0.95 * (n - 1))] / 1000 * p95_factor if n >= 20 else None,
            "p50_null_reason": None if n >= 5 else "too few", "p95_null_reason": None if n >= 20
            else "too few", "duration_method": "exact"})
    return {"groups": groups, "durations": {"relative_error": 0.01, "min_n_p50": 5, "min_n_p95": 20}}


def test_aggregation_row_passes_on_an_exact_report():
    _, truth = aggregation.generate()
    result = PromiseResult("aggregation")
    aggregation.check_report(_honest_report(truth), truth, aggregation.DIMS, "t", result)
    assert result.ok


def test_aggregation_row_fails_when_quota_is_counted_as_capacity():
    _, truth = aggregation.generate()
    result = PromiseResult("aggregation")
    aggregation.check_report(_honest_report(truth, quota_as_capacity=True), truth,
                             aggregation.DIMS, "t", result)
    assert result.failures()
    assert all("quota never capacity" in c.name for c in result.failures())


def test_aggregation_row_fails_when_p95_is_outside_the_stated_error():
    _, truth = aggregation.generate()
    result = PromiseResult("aggregation")
    aggregation.check_report(_honest_report(truth, p95_factor=1.10), truth, aggregation.DIMS,
                             "t", result)
    assert result.failures()
    assert all("p95 within" in c.name for c in result.failures())


def _sketch_report(truth, p95_factor: float, declared_error: float) -> dict[str, Any]:
    report = _honest_report(truth, p95_factor=p95_factor)
    for group in report["groups"]:
        group["duration_method"] = "ddsketch"
    report["durations"].update(relative_error=declared_error, min_n_p50=1, min_n_p95=1)
    return report


def test_aggregation_row_fails_a_p95_40_percent_high_despite_a_self_declared_50_percent_bound():
    _, truth = aggregation.generate()
    result = PromiseResult("aggregation")
    aggregation.check_report(_sketch_report(truth, 1.40, 0.50), truth, aggregation.DIMS, "t",
                             result)
    assert result.failures()
    assert all("p95 within" in c.name for c in result.failures())


def test_aggregation_row_passes_a_sketch_inside_the_suites_own_one_percent():
    _, truth = aggregation.generate()
    result = PromiseResult("aggregation")
    aggregation.check_report(_sketch_report(truth, 1.005, 0.50), truth, aggregation.DIMS, "t",
                             result)
    assert result.ok


def test_an_exact_report_off_by_one_rank_fails():
    durations = [1000, 2000, 3000, 4000, 5000, 6000]
    # floor(0.5 * 5) = 2 -> 3000 ms; the next rank up is not the exact value
    assert aggregation.quantile_ok(3.0, durations, 0.5, "exact")
    assert not aggregation.quantile_ok(4.0, durations, 0.5, "exact")


# -- delegated prefetch ---------------------------------------------------------------------------
def test_prefetch_row_fails_when_duplicates_create_two_requests():
    replies = [Reply(202, '{"id": "pf_a_1"}'), Reply(202, '{"id": "pf_b_1"}')]
    result = PromiseResult("delegated prefetch")
    assert delegated_prefetch.check_duplicates(replies, result) is None
    assert len(result.failures()) == 2


def test_prefetch_row_fails_when_redelivery_makes_a_second_volume():
    result = PromiseResult("delegated prefetch")
    delegated_prefetch.check_executed_once({"status": "completed", "dispatch_count": 1}, 2,
                                           "redelivery", result)
    assert [c.name for c in result.failures()] == ["redelivery: one provider volume"]


def test_prefetch_row_passes_for_one_request_one_dispatch_one_volume():
    replies = [Reply(202, '{"id": "pf_a_1"}')] + [Reply(200, '{"id": "pf_a_1"}')] * 5
    result = PromiseResult("delegated prefetch")
    assert delegated_prefetch.check_duplicates(replies, result) == "pf_a_1"
    delegated_prefetch.check_executed_once({"status": "completed", "dispatch_count": 1}, 1, "d", result)
    assert result.ok


# -- rows and evidence ------------------------------------------------------------------------------
def test_a_promise_whose_capability_is_missing_fails_and_says_what_is_missing():
    row = PromiseResult("aggregation").not_available("GET /v1/capacity")
    assert not row.ok
    assert row.failed == 1
    assert row.summary == "not available: GET /v1/capacity"


def test_a_crashing_promise_is_a_failed_row_not_a_crashed_run():
    def boom() -> PromiseResult:
        raise RuntimeError("stack went away")

    row = guarded("tenancy", boom)
    assert not row.ok
    assert "stack went away" in row.checks[0].detail


def test_evidence_digest_ignores_volatile_fields_and_follows_verdicts():
    ok = PromiseResult("tenancy", tried="matrix")
    ok.check("a", True, detail="port 4242")
    a = evidence_document([ok], "local-qualification", {"started_at": "t1", "port": 1}, "c" * 40)
    b = evidence_document([ok], "local-qualification", {"started_at": "t2", "port": 2}, "c" * 40)
    assert a["digest"] == b["digest"]
    assert verify(a)
    bad = PromiseResult("tenancy", tried="matrix")
    bad.check("a", False)
    c = evidence_document([bad], "local-qualification", {"started_at": "t1"}, "c" * 40)
    assert c["digest"] != a["digest"]
    assert c["ok"] is False
    d = evidence_document([ok], "local-qualification", {}, "d" * 40)
    assert d["digest"] != a["digest"]


def test_prefetch_row_accepts_a_second_attempt_only_after_the_first_ended():
    replies = ([Reply(202, '{"id": "pf_a_1"}')] + [Reply(200, '{"id": "pf_a_1"}')] * 3
               + [Reply(202, '{"id": "pf_a_2"}'), Reply(200, '{"id": "pf_a_2"}')])
    ended_first = PromiseResult("delegated prefetch")
    assert delegated_prefetch.check_duplicates(replies, ended_first, lambda i: i == "pf_a_1") \
        == "pf_a_2"
    assert ended_first.ok
    both_active = PromiseResult("delegated prefetch")
    delegated_prefetch.check_duplicates(replies, both_active, lambda i: False)
    assert [c.name for c in both_active.failures()] == [
        "6 concurrent identical requests → one active request"]
    twice = [Reply(202, '{"id": "pf_a_1"}'), Reply(202, '{"id": "pf_a_1"}')]
    created_twice = PromiseResult("delegated prefetch")
    delegated_prefetch.check_duplicates(twice, created_twice)
    assert len(created_twice.failures()) == 1
