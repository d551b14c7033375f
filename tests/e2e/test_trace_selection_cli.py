"""`infercrane replay --select` through the CLI and the local stack, on the vendored Azure code
hour (8,818 requests, no sessions) and a Mooncake excerpt with sessions. Oracles: the whole
window's own trace (built untruncated), scipy's two-sample KS, and spans counted here."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from scipy.stats import ks_2samp

pytestmark = pytest.mark.slow

START = "2026-11-03T00:00:00Z"
UNTIL = "2026-11-03T01:30:00Z"
DEPLOYMENT = "e2e-select-azure"


@pytest.fixture(scope="module")
def whole(served, shared_data, tmp_path_factory) -> dict:
    """The whole window's trace: the reference every slice is checked against."""
    done = served.cli("capture", "import", str(shared_data / "azure_llm_inference_2023_code.csv"),
                      "--deployment", DEPLOYMENT, "--format", "azure-csv", "--start", START,
                      "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("whole") / "whole.json"
    done = replay(served, path, "100000", "head")
    assert done.returncode == 0, done.stderr
    document = json.loads(path.read_text())
    assert document["truncated"] is False and "selection" not in document
    return document


def replay(served, path: Path, max_requests: str, select: str, deployment: str = DEPLOYMENT):
    return served.cli("replay", deployment, "--window", "2h", "--until", UNTIL,
                      "--max-requests", max_requests, "--select", select, "--save", str(path),
                      "--output", "json")


def offset_in(whole: dict, document: dict) -> int:
    """Where the slice's records begin in the whole window's records (contiguous by design)."""
    records = [json.dumps(r, sort_keys=True) for r in document["records"]]
    everything = [json.dumps(r, sort_keys=True) for r in whole["records"]]
    start = everything.index(records[0])
    assert everything[start:start + len(records)] == records
    return start


def scipy_distances(whole: dict, document: dict) -> dict[str, float]:
    def gaps(doc):
        offsets = [r["offset_ms"] for r in doc["records"]]
        return [b - a for a, b in itertools.pairwise(offsets)]

    return {name: float(ks_2samp([r[name] for r in document["records"]],
                                 [r[name] for r in whole["records"]], method="asymp").statistic)
            for name in ("input_tokens", "output_tokens")} | {
        "inter_arrival_ms": float(ks_2samp(gaps(document), gaps(whole),
                                           method="asymp").statistic)}


@pytest.fixture(scope="module")
def slices(served, whole, tmp_path_factory) -> dict[str, tuple]:
    """Each method's slice of 800, built once: (header, saved document, saved path, stderr).
    Reading the 8,818-request window is most of each build's time."""
    folder = tmp_path_factory.mktemp("slices")
    built = {}
    for select in ("head", "busiest", "representative"):
        path = folder / f"{select}.json"
        done = replay(served, path, "800", select)
        assert done.returncode == 0, done.stderr
        built[select] = (json.loads(done.stdout), json.loads(path.read_text()), path, done.stderr)
    return built


@pytest.mark.parametrize("select", ["head", "busiest", "representative"])
def test_each_selection_is_a_contiguous_slice_recorded_with_scipys_distances(
        served, whole, slices, select):
    header, document, path, _ = slices[select]
    selection = header["selection"]
    assert selection == document["selection"]
    assert (selection["method"], selection["window_requests"]) == (select, whole["sample_count"])
    assert document["truncated"] is True and document["sample_count"] == 800
    start = offset_in(whole, document)
    offsets = [r["offset_ms"] for r in whole["records"]]
    spans = [offsets[i + 799] - offsets[i] for i in range(len(offsets) - 799)]
    if select == "head":
        assert start == 0
    elif select == "busiest":
        assert spans[start] == min(spans)
    assert selection["span"]["duration_ms"] == spans[start]
    assert selection["ks"] == pytest.approx(scipy_distances(whole, document), abs=1e-9)
    assert f"truncated: the {select} slice" in served.cli(
        "trace", "show", header["digest"]).stdout
    assert served.cli("trace", "verify", str(path), tenant=None).returncode == 0


def test_representative_is_closer_to_the_window_than_the_head_and_warns_when_small(
        served, slices, tmp_path):
    worst = {name: max(slices[name][0]["selection"]["ks"].values())
             for name in ("head", "representative")}
    assert worst["representative"] < worst["head"]
    # 800 of 8,818 requests of an hour span well under 10 % of it: said on stderr.
    header, _, _, stderr = slices["representative"]
    assert header["selection"]["coverage"] < 0.10
    assert "warning: the representative slice spans" in stderr
    large = replay(served, tmp_path / "large.json", "5000", "representative")
    assert json.loads(large.stdout)["selection"]["coverage"] >= 0.10
    assert "warning" not in large.stderr


def test_a_slice_keeps_sessions_whole_and_counts_those_left_out(served, shared_data, tmp_path):
    rows = (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()[:600]
    # Sessions of three consecutive rows: a slice of 100 cuts at most the ones at its edges.
    lines = [json.dumps({**json.loads(line), "session_id": f"conv-{i // 3}"})
             for i, line in enumerate(rows)]
    source = tmp_path / "sessions.jsonl"
    source.write_text("\n".join(lines) + "\n")
    done = served.cli("capture", "import", str(source), "--deployment", "e2e-select-sessions",
                      "--format", "mooncake-jsonl", "--start", START, "--output", "json",
                      timeout=600)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "sessions-trace.json"
    done = replay(served, path, "100", "busiest", deployment="e2e-select-sessions")
    assert done.returncode == 0, done.stderr
    document = json.loads(path.read_text())
    turns: dict[str, int] = {}
    for record in document["records"]:
        turns[record["session_id"]] = turns.get(record["session_id"], 0) + 1
    assert set(turns.values()) == {3}
    left_out = document["selection"]["sessions_left_out"]
    assert 1 <= left_out <= 2
    assert document["sample_count"] == 100 - document["selection"][
        "requests_left_out_for_sessions"]
