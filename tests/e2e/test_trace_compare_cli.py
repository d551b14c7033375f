"""`infercrane trace compare` through the local stack: real traces imported, built, compared.

Two half-hours of the Azure code trace (the first 1,500 requests of each, imported as two
deployments so each read stays short on a busy machine) are one source; Azure against Mooncake
are two. The expected verdicts of
the token figures come from SciPy on the same rows of the files.
"""

from __future__ import annotations

import csv
import json
from datetime import datetime

import pytest
from scipy.stats import ks_2samp

# Imports about 3,300 real requests into the local stack.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

START = "2026-10-01T00:00:00Z"
UNTIL = "2026-10-01T01:00:00Z"
PER_HALF = 1500
MOONCAKE_ROWS = 300


def imported(served, path, deployment, fmt):
    done = served.cli("capture", "import", str(path), "--deployment", deployment, "--format", fmt,
                      "--start", START, "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr


def built(served, deployment):
    return served.cli_json("replay", deployment, "--window", "1h", "--until", UNTIL,
                           "--max-requests", str(PER_HALF))["digest"]


def azure_halves(shared_data):
    with (shared_data / "azure_llm_inference_2023_code.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    t0 = datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])
    first = [r for r in rows if (datetime.fromisoformat(r["TIMESTAMP"][:26]) - t0)
             .total_seconds() < 1800]
    return first[:PER_HALF], rows[len(first):len(first) + PER_HALF]


@pytest.fixture(scope="module")
def traces(served, shared_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("drift")
    first, second = azure_halves(shared_data)
    for name, rows in (("first", first), ("second", second)):
        with (folder / f"{name}.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        imported(served, folder / f"{name}.csv", f"e2e-drift-{name}", "azure-csv")
    moon = folder / "mooncake.jsonl"
    # Mooncake rows carry up to ~80 prefix blocks each: fewer rows keep the read short.
    moon.write_text("\n".join((shared_data / "mooncake_fast25_synthetic_trace.jsonl")
                              .read_text().splitlines()[:MOONCAKE_ROWS]) + "\n")
    imported(served, moon, "e2e-drift-moon", "mooncake-jsonl")
    return {"first": built(served, "e2e-drift-first"),
            "second": built(served, "e2e-drift-second"),
            "mooncake": built(served, "e2e-drift-moon")}


def test_half_hours_of_one_trace_keep_their_token_shape_and_mooncake_differs(served, traces,
                                                                             shared_data,
                                                                             tmp_path):
    saved = tmp_path / "drift.json"
    same = served.cli_json("trace", "compare", traces["first"][7:19], traces["second"][7:19],
                           "--save", str(saved))
    first, second = azure_halves(shared_data)
    assert (same["a"]["sample_count"], same["b"]["sample_count"]) == (len(first), len(second))
    for name, column in (("input_tokens", "ContextTokens"), ("output_tokens", "GeneratedTokens")):
        want = ks_2samp([int(r[column]) for r in first], [int(r[column]) for r in second])
        assert want.pvalue >= 0.01  # the oracle: SciPy on the file
        assert same["figures"][name]["statistic"] == pytest.approx(want.statistic)
        assert same["figures"][name]["verdict"] == "same shape"
    other = served.cli_json("trace", "compare", traces["first"], traces["mooncake"])
    for name in ("input_tokens", "output_tokens", "inter_arrival_ms"):
        assert other["figures"][name]["verdict"] == "shifted"
    assert other["verdict"] == "shifted"
    assert other["a"]["digest"] == traces["first"]
    assert other["b"]["digest"] == traces["mooncake"]
    # The saved comparison verifies like a trace (signed, with its sidecar), and the service
    # kept the same one.
    assert json.loads(saved.read_text()) == same
    assert served.cli("trace", "verify", str(saved)).returncode == 0
    tampered = dict(same, verdict="same shape" if same["verdict"] == "shifted" else "shifted")
    saved.write_text(json.dumps(tampered))
    assert served.cli("trace", "verify", str(saved)).returncode == 5  # verification failed


def test_compare_table_states_verdicts_and_refuses_unknown_or_foreign_traces(served, traces):
    done = served.cli("trace", "compare", traces["first"], traces["mooncake"])
    assert done.returncode == 0, done.stderr
    assert "shifted" in done.stdout and "significance 0.01" in done.stdout
    missing = served.cli("trace", "compare", "abcdef0123", traces["first"])
    assert missing.returncode == 4, missing.stderr
    foreign = served.cli("trace", "compare", traces["first"], traces["second"], tenant="other")
    assert foreign.returncode == 4
    bad = served.cli("trace", "compare", "xyz", traces["first"])
    assert bad.returncode == 2 and "field: a" in bad.stderr
