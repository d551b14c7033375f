"""Capture as a user: `infercrane capture import` through the local stack, OTLP over HTTP."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from infercrane.adapters.segments.store import SegmentObservationStore
from infercrane.domain.observation import StoredObservation
from tests.unit.test_capture_otlp import proto_export


def partition(served: Any, tenant: str, deployment: str) -> list[StoredObservation]:
    """The observations of one deployment, read from its segments as the service reads them
    (deduplicated), with the stack operator's clients."""
    ddb, s3 = served.aws("dynamodb"), served.aws("s3")
    table = next(t for t in ddb.list_tables()["TableNames"] if "ObservationsTable" in t)
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "documents" in b["Name"])
    store = SegmentObservationStore(s3, ddb, bucket, table, 30)
    return list(store.query(tenant, deployment, 0, 10**13 - 1))


@pytest.mark.slow
def test_azure_trace_imports_with_no_rejection_and_reimport_stores_nothing_new(served, shared_data):
    trace = shared_data / "azure_llm_inference_2023_code.csv"
    first = served.cli_json("capture", "import", str(trace), "--deployment", "azure-code",
                            "--format", "azure-csv")
    assert (first["accepted"], first["rejected"], first["stored"], first["already_present"],
            first["status"], first["errors"]) == (8819, 0, 8819, 0, "new", [])
    stored = partition(served, "demo", "azure-code")
    assert len(stored) == 8819
    assert {o.timing_source for o in stored} == {"modeled"}
    again = served.cli_json("capture", "import", str(trace), "--deployment", "azure-code",
                            "--format", "azure-csv")
    assert (again["accepted"], again["stored"], again["already_present"], again["status"],
            again["import_id"]) == (8819, 0, 8819, "same", first["import_id"])
    assert partition(served, "demo", "azure-code") == stored  # not even an ingest time changed
    assert partition(served, "other", "azure-code") == []


def test_mooncake_import_needs_start_and_then_succeeds(served, shared_data, tmp_path: Path):
    lines = (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()[:300]
    sample = tmp_path / "mooncake.jsonl"
    sample.write_text("\n".join(lines) + "\n")
    refused = served.cli("capture", "import", str(sample), "--deployment", "mooncake",
                         "--format", "mooncake-jsonl")
    assert refused.returncode == 2
    assert "start" in refused.stderr
    done = served.cli_json("capture", "import", str(sample), "--deployment", "mooncake",
                           "--format", "mooncake-jsonl", "--start", "2026-11-29T00:00:00Z")
    assert (done["accepted"], done["rejected"]) == (300, 0)
    first_arrival = min(o.arrival_ms for o in partition(served, "demo", "mooncake"))
    assert first_arrival == 1795910400000  # first arrival moved to --start


def test_the_same_file_under_another_start_is_refused_or_replaces_never_doubles(
        served, shared_data, tmp_path: Path):
    lines = (shared_data / "azure_llm_inference_2023_code.csv").read_text().splitlines()[:301]
    sample = tmp_path / "azure-300.csv"
    sample.write_text("\n".join(lines) + "\n")
    args = ("capture", "import", str(sample), "--deployment", "azure-once", "--format",
            "azure-csv")
    first = served.cli_json(*args)
    assert (first["stored"], first["header_lines"]) == (300, 1)
    moved = served.cli(*args, "--start", "2026-11-29T00:00:00Z")
    assert moved.returncode == 2
    assert "--replace" in moved.stderr
    assert len(partition(served, "demo", "azure-once")) == 300
    replaced = served.cli(*args, "--start", "2026-11-29T00:00:00Z", "--replace",
                          "--output", "json")
    assert replaced.returncode == 0, replaced.stderr
    doc = json.loads(replaced.stdout)
    assert (doc["status"], doc["replaced"], doc["deleted"], doc["stored"]) == (
        "replaced", first["import_id"], 300, 300)
    stored = partition(served, "demo", "azure-once")
    assert len(stored) == 300
    # The first import's rows went: every row left is the new import's.
    prefixes = {o.observation_id[:len("imp-") + 16 + 1] for o in stored}  # domain/imports.id_prefix
    assert len(prefixes) == 1
    assert min(o.arrival_ms for o in stored) == 1795910400000
    assert "importing azure-300.csv" in replaced.stderr and "300 rows" in replaced.stderr


def test_mooncake_text_is_dropped_with_a_count_on_stderr(served, tmp_path: Path):
    rows = [{"timestamp": 10 * n, "input_length": 50, "output_length": 5,
             "text_input": "CANARY-e2e-text"} for n in range(3)]
    sample = tmp_path / "text.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = served.cli("capture", "import", str(sample), "--deployment", "mooncake-text",
                      "--format", "mooncake-jsonl", "--start", "2026-11-29T00:00:00Z",
                      "--output", "json")
    assert done.returncode == 0, done.stderr
    assert "dropped `text_input` on 3 rows" in done.stderr
    assert json.loads(done.stdout)["dropped_fields"] == {"text_input": 3}
    assert "CANARY-e2e-text" not in repr(partition(served, "demo", "mooncake-text"))


def test_rejected_records_are_reported_by_line_with_exit_code_2(served, tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"arrival": "2026-11-29T00:00:00Z", "input_tokens": 5, "output_tokens": 1,
                    "latency_ms": 10}) + "\n"
        + json.dumps({"arrival": "2026-11-29T00:00:01Z", "input_tokens": 5, "output_tokens": 1,
                      "latency_ms": 10, "prompt": "CANARY-e2e-body"}) + "\n"
        + json.dumps({"arrival": "2026-11-29T00:00:02Z", "input_tokens": -5, "output_tokens": 1,
                      "latency_ms": 10}) + "\n")
    done = served.cli("capture", "import", str(bad), "--deployment", "jsonl-bad", "--format",
                      "jsonl", "--output", "json")
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert (doc["accepted"], doc["rejected"]) == (1, 2)
    assert [(e["line"], e["field"], e["code"]) for e in doc["errors"]] == [
        (2, "prompt", "body_field_refused"), (3, "input_tokens", "out_of_range")]
    assert "CANARY-e2e-body" not in done.stdout + done.stderr


def test_otlp_protobuf_over_http_is_answered_in_protobuf(served):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    request = urllib.request.Request(
        f"{served.endpoint}/v1/otlp/v1/traces?deployment=otlp-e2e", data=proto_export(),
        method="POST", headers={"Content-Type": "application/x-protobuf",
                                "Authorization": f"Bearer {served.tenants['demo']}"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/x-protobuf"
        answer = ExportTraceServiceResponse.FromString(resp.read())
    assert answer.partial_success.rejected_spans == 0
    assert len(partition(served, "demo", "otlp-e2e")) == 1
