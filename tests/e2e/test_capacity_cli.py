"""Capacity intelligence as a user sees it: import lifecycle attempts, read the report."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from infercrane.domain import capacity_synth


@pytest.fixture(scope="module")
def imported(served, tmp_path_factory):
    now = datetime.now(UTC)
    synth = capacity_synth.generate(240, seed=99, end=now, id_prefix="e2e", hours=12)
    path = tmp_path_factory.mktemp("lifecycle") / "attempts.jsonl"
    lines = [json.dumps(a) for a in synth.attempts]
    lines.insert(5, "{not json")
    lines.insert(9, json.dumps(dict(synth.attempts[0], attempt_id="e2e-bad", gpu_count=-3)))
    path.write_text("\n".join(lines) + "\n")
    done = served.cli("lifecycle", "import", str(path), "--output", "json")
    return synth, path, done


def test_lifecycle_import_stores_valid_lines_and_reports_the_rejected_ones(imported):
    _synth, _, done = imported
    assert done.returncode == 2, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["accepted"], doc["rejected"]) == (240, 2)
    assert [(e["line"], e["field"], e["code"]) for e in doc["errors"]] == [
        (6, None, "invalid_json"), (10, "gpu_count", "out_of_range")]
    assert "-3" not in done.stdout


def test_reimporting_the_same_file_changes_nothing(served, imported):
    _, path, _ = imported
    before = served.cli_json("capacity", "--window", "24h")
    again = served.cli("lifecycle", "import", str(path), "--output", "json")
    assert json.loads(again.stdout)["accepted"] == 240
    assert served.cli_json("capacity", "--window", "24h")["groups"] == before["groups"]


def test_capacity_report_matches_the_ground_truth_before_and_after_the_rollup(served, imported):
    synth, _, _ = imported
    report = served.cli_json("capacity", "--window", "24h")
    assert report["scope"] == "tenant-observed"
    for g in report["groups"]:
        truth = synth.truth[(g["adapter"], g["runtime"], g["compute_mode"], g["region"], g["gpu"])]
        assert (g["samples"], g["succeeded"], g["failed"]) == (truth.samples, truth.succeeded,
                                                               truth.failed)
    assert sum(g["samples"] for g in report["groups"]) == 240
    tick = served.cli("local", "tick", "aggregate", "--output", "json")
    assert tick.returncode == 0, tick.stderr
    assert served.cli_json("capacity", "--window", "24h")["groups"] == report["groups"]


def test_group_by_coarsens_and_other_tenants_see_nothing_of_it(served, imported):
    coarse = served.cli_json("capacity", "--window", "24h", "--group-by", "adapter,gpu")
    assert coarse["group_by"] == ["adapter", "gpu"]
    assert all(g["runtime"] is None and g["region"] is None for g in coarse["groups"])
    assert sum(g["samples"] for g in coarse["groups"]) == 240
    assert served.cli_json("capacity", "--window", "24h", tenant="other")["groups"] == []


def test_capacity_table_says_it_is_tenant_observed_and_marks_capacity_dominated_groups(served,
                                                                                       imported):
    done = served.cli("capacity", "--window", "24h")
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    assert "tenant-observed" in flat
    assert "not global availability" in flat
    assert "H100" in done.stdout
    report = served.cli_json("capacity", "--window", "24h")
    if any(g["capacity_dominant"] for g in report["groups"]):
        assert any(line.lstrip("│| ").startswith("!") for line in done.stdout.splitlines())


def test_capacity_refuses_a_bad_window_with_exit_code_2(served):
    done = served.cli("capacity", "--window", "soon")
    assert done.returncode == 2
    assert "window" in done.stderr


def test_capacity_advise_ranks_this_tenants_h100_placements_the_same_via_cli_and_http(served,
                                                                                    imported):
    import urllib.parse
    import urllib.request

    doc = served.cli_json("capacity", "advise", "--gpu", "H100", "--count", "8",
                          "--window", "24h")
    assert doc["scope"] == "tenant-observed"
    assert doc["options"], "the generated history has H100 groups"
    lows = [o["lower_bound"] for o in doc["options"] if o["lower_bound"] is not None]
    assert lows == sorted(lows, reverse=True)
    assert all(o["gpu"] == "H100" and o["basis"] and o["why"] for o in doc["options"])
    query = urllib.parse.urlencode({"gpu": "H100", "count": 8, "window": "24h"})
    request = urllib.request.Request(f"{served.endpoint}/v1/capacity/advice?{query}", headers={
        "Authorization": f"Bearer {served.tenants['demo']}"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        over_http = json.loads(resp.read())
    assert over_http["options"] == doc["options"]
    assert served.cli_json("capacity", "advise", "--gpu", "H100", "--window", "24h",
                           tenant="other")["options"] == []
    table = served.cli("capacity", "advise", "--gpu", "H100", "--window", "24h")
    assert table.returncode == 0, table.stderr
    assert "not global availability" in " ".join(table.stdout.split())
    bad = served.cli("capacity", "advise", "--gpu", "H 100")
    assert bad.returncode == 2 and "gpu" in bad.stderr


@pytest.mark.parametrize("columns", ["80", None])
def test_capacity_tables_piped_at_80_columns_or_none_cut_no_header(served, imported, columns):
    import subprocess

    from tests.e2e.conftest import BIN

    env = served.env()
    env.pop("COLUMNS")
    if columns:
        env["COLUMNS"] = columns
    for args in (["capacity", "--window", "24h"],
                 ["capacity", "advise", "--gpu", "H100", "--window", "24h"]):
        done = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert "…" not in done.stdout
        assert "H100" in done.stdout
    lines = [line.strip() for line in done.stdout.splitlines()]
    # the last stdout is the advice: each option's heading names its placement in full
    assert any(line.startswith("1 · ") for line in lines)
