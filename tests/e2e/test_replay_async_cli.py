"""`infercrane replay` on a window too large for one request: the service answers 202, the
trace_build function builds it from TraceBuildQueue, and the CLI polls, shows progress on stderr
and prints the header as for any build. The stack runs with a small synchronous limit so a
vendored trace is "large"."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Served, serving

pytestmark = pytest.mark.slow

START = "2026-11-01T00:00:00Z"
UNTIL = "2026-11-01T01:30:00Z"
# Ten times the stack's synchronous limit: the asynchronous path, its progress lines and the
# stored document, without importing and reading back the whole trace (4,000 rows) in moto.
ROWS = 1000


@pytest.fixture(scope="module")
def small_limit_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("async-stack"),
                 env={"INFERCRANE_TRACE_SYNC_LIMIT": "100"}) as stack:
        yield stack


def test_a_large_window_is_built_asynchronously_with_progress(small_limit_stack, shared_data,
                                                              tmp_path):
    served = small_limit_stack
    rows = [line for line in (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text()
            .splitlines() if line.strip()][:ROWS]
    path = tmp_path / "mooncake-1000.jsonl"
    path.write_text("\n".join(rows) + "\n")
    done = served.cli("capture", "import", str(path), "--deployment", "e2e-async", "--format",
                      "mooncake-jsonl", "--start", START, "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr
    saved = tmp_path / "trace.json"
    built = served.cli("replay", "e2e-async", "--window", "2h", "--until", UNTIL,
                       "--max-requests", "100000", "--save", str(saved), "--output", "json",
                       timeout=600)
    assert built.returncode == 0, built.stderr
    assert "asynchronously" in built.stderr
    assert "reading observations" in built.stderr
    header = json.loads(built.stdout)
    assert header["sample_count"] == len(rows) == ROWS > 100
    assert header["truncated"] is False
    document = json.loads(saved.read_bytes())
    assert document["digest"] == header["digest"]
    verified = served.cli("trace", "verify", str(saved))
    assert verified.returncode == 0, verified.stderr
    # The same window again: the stored trace is found, not built twice.
    again = served.cli("replay", "e2e-async", "--window", "2h", "--until", UNTIL,
                       "--max-requests", "100000", "--output", "json", timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["digest"] == header["digest"]
    # A window of more than the synchronous limit with fewer requests kept: built asynchronously
    # too (choosing the slice needs the whole window), the busiest slice of the whole trace.
    offsets = [r["offset_ms"] for r in document["records"]]
    spans = [offsets[i + 199] - offsets[i] for i in range(len(offsets) - 199)]
    sliced = tmp_path / "busiest.json"
    busiest = served.cli("replay", "e2e-async", "--window", "2h", "--until", UNTIL,
                         "--max-requests", "200", "--select", "busiest", "--save", str(sliced),
                         "--output", "json", timeout=600)
    assert busiest.returncode == 0, busiest.stderr
    assert "asynchronously" in busiest.stderr
    selection = json.loads(busiest.stdout)["selection"]
    assert (selection["method"], selection["window_requests"]) == ("busiest", ROWS)
    assert selection["span"]["duration_ms"] == min(spans)
    assert served.cli("trace", "verify", str(sliced)).returncode == 0


def test_a_large_build_of_an_unknown_deployment_is_refused_before_it_is_queued(
        small_limit_stack):
    done = small_limit_stack.cli("replay", "e2e-async-nobody", "--window", "2h", "--until",
                                 UNTIL, "--max-requests", "100000")
    assert done.returncode == 4, done.stderr
    assert "asynchronously" not in done.stderr
    assert "no observations at all" in done.stderr
