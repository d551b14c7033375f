"""`infercrane replay` and `infercrane trace` through the local stack, as a user runs them.

The traffic comes from the shared real traces, imported with `infercrane capture import`;
expected figures are computed from the files themselves.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Imports thousands of real requests into the local stack and reads them back.
pytestmark = pytest.mark.slow

START = "2026-11-01T00:00:00Z"
UNTIL = "2026-11-01T01:30:00Z"  # a 2h window ending here covers the imported hour


def first_seen(rows_of_ids):
    numbers: dict = {}
    return [[numbers.setdefault(h, len(numbers)) for h in ids] for ids in rows_of_ids]


def imported(served, path: Path, deployment: str, fmt: str) -> None:
    done = served.cli("capture", "import", str(path), "--deployment", deployment, "--format", fmt,
                      "--start", START, "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def azure(served, shared_data):
    path = shared_data / "azure_llm_inference_2023_code.csv"
    imported(served, path, "e2e-azure", "azure-csv")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return rows


@pytest.fixture(scope="module")
def mooncake(served, shared_data):
    path = shared_data / "mooncake_fast25_synthetic_trace.jsonl"
    imported(served, path, "e2e-mooncake", "mooncake-jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_azure_hour_gives_the_files_count_and_mean_tokens(served, azure, tmp_path):
    header = served.cli_json("replay", "e2e-azure", "--window", "2h", "--until", UNTIL,
                             "--max-requests", "100000")
    inputs = [int(r["ContextTokens"]) for r in azure]
    outputs = [int(r["GeneratedTokens"]) for r in azure]
    assert header["sample_count"] == len(azure)
    assert header["truncated"] is False
    assert header["statistics"]["input_tokens"]["mean"] == sum(inputs) / len(inputs)
    assert header["statistics"]["output_tokens"]["mean"] == sum(outputs) / len(outputs)
    assert header["statistics"]["input_tokens"]["max"] == max(inputs)
    assert header["evidence_class"] == "imported"
    assert header["timing_source"] == "modeled"
    assert header["schema"] == "infercrane.replay.trace/v1"
    assert set(header["window"]) >= {"start", "end"}


def test_replaying_the_same_window_twice_gives_the_same_digest(served, azure):
    args = ("replay", "e2e-azure", "--window", "2h", "--until", UNTIL, "--max-requests", "500")
    first, second = served.cli_json(*args), served.cli_json(*args)
    assert first["digest"] == second["digest"]
    assert first["truncated"] is True
    assert first["sample_count"] == 500


def test_select_head_keeps_the_earliest_requests(served, azure, tmp_path):
    saved = tmp_path / "first100.json"
    done = served.cli("replay", "e2e-azure", "--window", "2h", "--until", UNTIL,
                      "--max-requests", "100", "--select", "head", "--save", str(saved),
                      "--output", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(saved.read_text())
    # The CSV is in arrival order, and the importer breaks equal arrivals by line.
    assert [r["input_tokens"] for r in document["records"]] == [
        int(r["ContextTokens"]) for r in azure[:100]]


def test_table_output_summarizes_and_says_nothing_is_sent(served, azure):
    done = served.cli("replay", "e2e-azure", "--window", "2h", "--until", UNTIL,
                      "--max-requests", "300")
    assert done.returncode == 0, done.stderr
    assert "sends no workload" in done.stderr
    assert "creates no infrastructure" in done.stderr
    assert "requests 300 of max 300 (truncated" in done.stdout
    assert "arrivals over the window" in done.stdout
    assert "input_tokens" in done.stdout


def test_saved_document_verifies_offline_and_a_changed_value_fails(served, azure, tmp_path):
    saved = tmp_path / "trace.json"
    header = json.loads(served.cli("replay", "e2e-azure", "--window", "2h", "--until", UNTIL,
                                   "--max-requests", "2000", "--save", str(saved),
                                   "--output", "json").stdout)
    # No API key: the public key comes from the public route, the envelope from the sidecar.
    ok = served.cli("trace", "verify", str(saved), tenant=None)
    assert ok.returncode == 0, ok.stderr
    assert header["digest"] in ok.stdout
    attestation = f"{saved}.intoto.jsonl"
    document = json.loads(saved.read_text())
    reformatted = tmp_path / "pretty.json"
    reformatted.write_text(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True))
    assert served.cli("trace", "verify", str(reformatted), "--attestation", attestation,
                      tenant=None).returncode == 0
    document["records"][7]["output_tokens"] += 1
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    failed = served.cli("trace", "verify", str(tampered), "--attestation", attestation,
                        tenant=None)
    assert failed.returncode == 5
    assert "Verification failed: digest" in failed.stderr


def test_trace_show_and_list_and_another_tenant_gets_not_found(served, azure):
    header = served.cli_json("replay", "e2e-azure", "--window", "2h", "--until", UNTIL,
                             "--max-requests", "50")
    shown = served.cli_json("trace", "show", header["digest"])
    assert shown["digest"] == header["digest"]
    assert shown["statistics"] == header["statistics"]
    listed = served.cli_json("trace", "list", "e2e-azure")
    assert header["digest"] in [h["digest"] for h in listed["traces"]]
    other = served.cli("trace", "show", header["digest"], tenant="other")
    assert other.returncode == 4
    assert served.cli_json("trace", "list", "e2e-azure", tenant="other")["traces"] == []


def test_an_empty_window_of_a_known_deployment_is_not_found_and_nothing_is_stored(
        served, azure, tmp_path):
    before = served.cli_json("trace", "list", "e2e-azure")["traces"]
    saved = tmp_path / "empty.json"
    done = served.cli("replay", "e2e-azure", "--window", "30m", "--until", START, "--save",
                      str(saved), "--output", "json")
    assert done.returncode == 4
    assert "no observations in this window" in done.stderr
    assert not saved.exists()
    assert served.cli_json("trace", "list", "e2e-azure")["traces"] == before


def test_a_deployment_never_captured_is_not_found(served):
    done = served.cli("replay", "e2e-nothing-here", "--window", "30m")
    assert done.returncode == 4
    assert "no observations at all" in done.stderr


@pytest.mark.parametrize("window", ["3weeks", "0h", "1.5h", "24"])
def test_bad_windows_are_refused_with_a_clear_error(served, window):
    done = served.cli("replay", "e2e-azure", "--window", window)
    assert done.returncode == 2
    assert "m, h or d" in done.stderr


@pytest.fixture(scope="module")
def mooncake_export(served, mooncake, tmp_path_factory):
    """The mooncake hour built once, saved and exported for AIPerf: its header and both files.
    Building and downloading the 6 MB document is most of a test's time; two tests read it."""
    folder = tmp_path_factory.mktemp("mooncake-export")
    exported, saved = folder / "mooncake.jsonl", folder / "mooncake-trace.json"
    done = served.cli("replay", "e2e-mooncake", "--window", "1h", "--until",
                      "2026-11-01T01:00:00Z", "--max-requests", "100000",
                      "--export-aiperf", str(exported), "--save", str(saved), "--output", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), exported, saved


def test_mooncake_trace_round_trips_row_by_row(served, mooncake, mooncake_export):
    header, exported, saved = mooncake_export
    # Large enough to come back through the presigned-URL redirect, not inline.
    assert header["document"]["size_bytes"] > 6 * 1024 * 1024
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(rows) == len(mooncake)
    assert [r["timestamp"] for r in rows] == [m["timestamp"] - mooncake[0]["timestamp"]
                                             for m in mooncake]
    assert [r["input_length"] for r in rows] == [m["input_length"] for m in mooncake]
    assert [r["output_length"] for r in rows] == [m["output_length"] for m in mooncake]
    assert [r["hash_ids"] for r in rows] == first_seen(m["hash_ids"] for m in mooncake)
    assert served.cli("trace", "verify", str(saved), tenant=None).returncode == 0


@pytest.fixture
def aiperf() -> str:
    # make test runs the venv's pytest without activating it: look beside the interpreter first.
    beside = Path(sys.executable).parent / "aiperf"
    path = str(beside) if beside.exists() else shutil.which("aiperf")
    if path is None:
        pytest.skip("aiperf is not installed (optional extra `execute`)")
    return path


def test_aiperf_analyze_trace_agrees_with_our_statistics(aiperf, mooncake_export, tmp_path):
    header, exported, _ = mooncake_export
    report = tmp_path / "analysis.json"
    subprocess.run([aiperf, "analyze-trace", str(exported), "--block-size", "512",
                    "--output-file", str(report)], check=True, capture_output=True, timeout=300)
    analysis = json.loads(report.read_text())
    stats = header["statistics"]
    assert analysis["total_requests"] == stats["request_count"]
    assert analysis["avg_isl"] == pytest.approx(stats["input_tokens"]["mean"])
    assert analysis["avg_osl"] == pytest.approx(stats["output_tokens"]["mean"])
    assert analysis["max_isl"] == stats["input_tokens"]["max"]
    assert analysis["max_osl"] == stats["output_tokens"]["max"]
    # A name shared with AIPerf carries AIPerf's value; ours is another quantity, another name.
    shared = set(stats) & set(analysis)
    assert all(stats[k] == pytest.approx(analysis[k]) for k in shared), shared
    assert "prefix_reuse_ratio" not in stats
