"""`infercrane qualify --local` as a user runs it: every promise holds on this commit, the table
has one row per promise, and a second run writes the same evidence. Slow: one full run with its own
local stack; the second run (its own stack too) repeats two promises only, whose evidence must equal
the first run's for those promises, digest included. The rows' failure on broken doubles is in
tests/unit/test_qualify_doubles.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rfc8785

from infercrane.qualify.evidence import canonical_digest
from infercrane.qualify.suite import PROMISE_MODULES, promise_module

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def qualify(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCRANE_")}
    env.update(NO_COLOR="1", COLUMNS="250")
    return subprocess.run([sys.executable, "-m", "infercrane.cli.main", "qualify", *args],
                          capture_output=True, text=True, env=env, timeout=1500, check=False)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    path = tmp_path_factory.mktemp("qualify") / "first.json"
    return qualify("--local", "--evidence", str(path)), path


def test_local_qualification_passes_with_one_row_per_promise(first_run):
    done, path = first_run
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for name in PROMISE_MODULES:
        assert promise_module(name).PROMISE in done.stdout
    assert f"evidence: {path}" in done.stdout
    doc = json.loads(path.read_text())
    assert doc["evidence_class"] == "local-qualification"
    assert doc["ok"] is True
    assert [p["promise"] for p in doc["promises"]] == [promise_module(m).PROMISE
                                                       for m in PROMISE_MODULES]
    assert all(p["checks"] > 0 and p["failed"] == 0 for p in doc["promises"])
    assert doc["digest"] == canonical_digest(doc)
    assert doc["package"]["version"]
    assert doc["commit"]


# The second run repeats the promises with the most digested detail per second of run time
# (706 named checks; digests of a fixed window); the full set is the first run, once per session.
REPEATED = ("capture_privacy", "deterministic_digests")


def test_evidence_digest_is_the_same_for_a_second_run_of_the_same_commit(first_run, tmp_path):
    done, path = first_run
    assert done.returncode == 0, done.stderr[-3000:]
    second = tmp_path / "second.json"
    only = [arg for name in REPEATED for arg in ("--only", name)]
    again = qualify("--local", *only, "--evidence", str(second), "--output", "json")
    assert again.returncode == 0, again.stderr[-3000:]
    a, b = json.loads(path.read_text()), json.loads(second.read_text())
    assert json.loads(again.stdout)["digest"] == b["digest"]
    if a["commit"] != b["commit"]:
        pytest.skip("HEAD moved between the two runs: the commit is part of the evidence")
    assert a["build"]["started_at"] != b["build"]["started_at"]  # volatile, yet...
    # ...the first run's evidence, cut to the repeated promises, is the second run's, digest too.
    names = [promise_module(m).PROMISE for m in REPEATED]
    assert [p["promise"] for p in b["promises"]] == names
    cut = [p for p in a["promises"] if p["promise"] in names]
    assert b["promises"] == cut
    same_part = {**{k: v for k, v in a.items() if k not in ("digest", "build")},
                 "promises": cut, "ok": all(p["ok"] for p in cut)}
    assert same_part == {k: v for k, v in b.items() if k not in ("digest", "build")}
    # The evidence contract's digest, computed here by the RFC 8785 library itself.
    assert "sha256:" + hashlib.sha256(rfc8785.dumps(same_part)).hexdigest() == b["digest"]


def test_provider_qualification_without_credentials_skips_in_one_line():
    done = qualify("--providers")
    assert done.returncode == 0
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("provider qualification skipped: needs")
