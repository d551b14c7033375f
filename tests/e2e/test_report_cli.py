"""`infercrane report` as a user runs it: real traffic, generated capacity history, one HTML file
opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import secrets
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from infercrane.domain import capacity_synth
from tests.support.browser import rendered, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

START = "2026-09-01T00:00:00Z"
UNTIL = "2026-09-01T01:00:00Z"
MODEL = "sha256:" + "e7" * 32
ROWS = 300


@pytest.fixture
def tenant(served):
    """A tenant of this test's own: its current lifecycle attempts stay out of the capacity
    reports other modules check on the same stack."""
    name = f"report{secrets.token_hex(3)}"
    created = served.cli("admin", "tenant", "create", name, "--output", "json", tenant=None)
    assert created.returncode == 0, created.stderr
    served.tenants[name] = json.loads(created.stdout)["api_key"]
    yield name
    # The session stack's tenants are its ready line's (test_local_stack checks them).
    del served.tenants[name]


def test_report_writes_one_html_file_whose_charts_all_draw(served, tenant, shared_data, tmp_path):
    # The first 1,500 Mooncake requests (with their prefix blocks): reads stay short.
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text("\n".join((shared_data / "mooncake_fast25_synthetic_trace.jsonl")
                                  .read_text().splitlines()[:ROWS]) + "\n")
    done = served.cli("capture", "import", str(mooncake), "--deployment", "e2e-report",
                      "--format", "mooncake-jsonl", "--start", START, "--output", "json",
                      timeout=600, tenant=tenant)
    assert done.returncode == 0, done.stderr
    # Current attempts, as a tenant has them: the capacity panel reads up to now, whatever the
    # traffic's (older) window.
    synth = capacity_synth.generate(150, seed=5, end=datetime.now(UTC), id_prefix="e2e-report",
                                    hours=6)
    attempts = tmp_path / "attempts.jsonl"
    attempts.write_text("".join(json.dumps(a) + "\n" for a in synth.attempts))
    assert served.cli("lifecycle", "import", str(attempts), tenant=tenant).returncode == 0
    observed = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    request = urllib.request.Request(
        f"{served.endpoint}/v1/cache-observations", method="POST",
        data=json.dumps({"model": MODEL, "adapter": "aws", "location": "us-east-1a",
                         "state": "present", "observed_at": observed,
                         "evidence": {"snapshot_id": "snap-0e2e"}}).encode(),
        headers={"Authorization": f"Bearer {served.tenants[tenant]}",
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        assert resp.status == 200

    out = tmp_path / "report.html"
    summary = served.cli_json("report", "--deployment", "e2e-report", "--window", "1h",
                              "--until", UNTIL, "--max-requests", str(ROWS), "--capacity-window", "24h",
                              "--model-digest", MODEL, "--out", str(out), tenant=tenant)
    assert summary["out"] == str(out.resolve())
    ids = [f["id"] for f in summary["figures"]]
    assert ids == ["arrival-rate", "input-tokens", "output-tokens", "prefix-reuse",
                   "capacity-heatmap", "cache-state"]
    assert all(f["drawn"] for f in summary["figures"])
    execution_note, capacity_note = summary["notes"]
    assert execution_note == "Execution fidelity: no execution recorded for this deployment yet."
    assert capacity_note.startswith("Capacity shows ")  # not the traffic's window: said
    assert "(2026-09-01T00:00:00.000Z → 2026-09-01T01:00:00.000Z)" in capacity_note
    trace = served.cli_json("trace", "show", summary["trace_digest"], tenant=tenant)
    assert trace["sample_count"] == ROWS  # every imported row
    assert {f["source_digest"] for f in summary["figures"][:4]} == {trace["digest"]}
    assert summary["figures"][0]["evidence_class"] == "imported traffic, modeled timing"

    dom = rendered(out)
    assert json.loads(dom.body["data-errors"]) == []
    assert dom.body["data-drawn"] == str(len(ids))
    for section in dom.sections:
        assert section.drawn and section.marks > 0, section.figure
    heatmap = next(s for s in dom.sections if s.figure == "capacity-heatmap")
    assert "H100" in heatmap.text and "(n=" in heatmap.text
    # The capacity panel names its own dates: 24 h up to now (whole hours), not the traffic's.
    start, end = re.search(r"capacity (\S+) → (\S+)", heatmap.text).groups()
    end_at = datetime.fromisoformat(end)
    assert abs(end_at - datetime.now(UTC)) <= timedelta(hours=1)
    assert end_at - datetime.fromisoformat(start) == timedelta(hours=24)
    assert "traffic 2026-09-01T00:00:00" in dom.sections[0].text
    assert "present" in next(s for s in dom.sections if s.figure == "cache-state").text

    # The README's picture is this page, taken by the same browser:
    # INFERCRANE_README_SCREENSHOT=docs/report-screenshot.png pytest tests/e2e/test_report_cli.py
    shot = Path(os.environ.get("INFERCRANE_README_SCREENSHOT") or tmp_path / "report.png")
    screenshot(out, shot, width=1400, height=1900)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
