"""A deployment with no observations is refused the same way on every path that builds a
trace, through the CLI as a user runs it: `replay` built in the request, `replay` with
--max-requests above the synchronous limit (the asynchronous path), and `report` (whose default
maximum takes that path). Each exits 4 and stores no trace: an empty trace would be labelled
`observed`, signed, and claim the deployment received nothing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

MISSPELLED = "e2e-coder-prodution"


def nothing_stored(served) -> bool:
    return served.cli_json("trace", "list", MISSPELLED)["traces"] == []


@pytest.mark.parametrize("args", [
    ("replay", MISSPELLED, "--window", "24h"),
    ("replay", MISSPELLED, "--window", "24h", "--max-requests", "50000"),
    ("report", "--deployment", MISSPELLED, "--window", "24h", "--out", "{tmp}/report.html"),
], ids=["replay-sync", "replay-async", "report"])
def test_an_unknown_deployment_exits_4_on_every_build_path_and_stores_nothing(
        served, tmp_path, args):
    done = served.cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert done.returncode == 4, done.stderr
    assert "no observations at all" in done.stderr
    assert nothing_stored(served)
    assert not (tmp_path / "report.html").exists()
