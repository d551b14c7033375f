"""DuckDB over the segments the local stack wrote answers what the trace built from them holds.

As a user: the Azure code trace imported with `infercrane capture import`, a jsonl file of
sessions imported beside it, and observations posted to the API in batches, some posted twice
(dedup matters) and one id named with two contents (the reader's rule decides which is kept).
The trace of the documented week (`infercrane replay --window 7d --save`) is the product's
answer; the deployment's segments, downloaded from the stack's S3 under their keys, are read by
DuckDB (the independent engine) with the columns generated from the one row schema.
docs/capture.md's three queries run as written but for their tenant and deployment (and DuckDB's
two dialect swaps) and equal what the trace's records say; so do the week's count, its means and
its rows, record by record.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
import requests

from infercrane.adapters.segments.layout import PREFIX
from tests.integration.test_observation_segments_sql import (
    documented_queries,
    in_duckdb,
    is_quantile,
    segments_sql,
)

# Imports the Azure trace (8,819 rows) through the local stack and reads it back.
pytestmark = pytest.mark.slow

DEPLOYMENT = "e2e-sql"
DAY = "2026-12-02"  # the documented queries' day; their week is 2026-11-26 .. 2026-12-02
WEEK_START = datetime(2026, 11, 26, tzinfo=UTC)
UNTIL = "2026-12-03T00:00:00Z"  # a 7d window ending here is the documented week
# The row's columns a trace record carries under the same name (its offset_ms is arrival_ms less
# the window's start).
RECORD_COLUMNS = ("input_tokens", "output_tokens", "cached_input_tokens", "ttft_ms", "latency_ms",
                  "outcome", "streaming", "sampling_rate", "source", "timing_source", "revision",
                  "session_id", "parent_session_id", "shared_prefix_id", "prefix_block_ids",
                  "prefix_block_size")


@dataclass(frozen=True)
class Stored:
    trace: dict[str, Any]  # the document `replay --save` wrote, header and records
    sql: duckdb.DuckDBPyConnection
    segments: int


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _item(rng: random.Random, n: int, arrival: datetime, sessions: list[str]) -> dict[str, Any]:
    streaming = rng.random() < 0.8
    outcome = rng.choices(("ok", "server_error", "timeout"), (90, 7, 3))[0]
    latency = round(rng.uniform(200, 20_000), 3)
    item = {"observation_id": f"{DEPLOYMENT}-{n:04d}", "deployment": DEPLOYMENT,
            "arrival": _at(arrival), "input_tokens": rng.randrange(1, 8000),
            "output_tokens": rng.randrange(0, 1200), "latency_ms": latency, "outcome": outcome,
            "streaming": streaming, "sampling_rate": rng.choice((1.0, 0.5, 0.25)),
            "revision": rng.choice(("r1", "r2"))}
    if streaming and outcome == "ok":
        item["ttft_ms"] = round(rng.uniform(20, 190), 3)
    if rng.random() < 0.7:
        item["session_id"] = rng.choice(sessions)
    return item


def _post(served: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    reply = requests.post(served.endpoint + "/v1/observations", json={"items": items},
                          timeout=60,
                          headers={"Authorization": f"Bearer {served.tenants['demo']}"})
    assert reply.status_code == 200, reply.text
    return reply.json()


def _download(served: Any, root: Path) -> int:
    """Every object under the deployment's prefix in the stack's documents bucket, to `root`
    under its key; returns how many."""
    s3 = served.aws("s3")
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "documents" in b["Name"])
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{PREFIX}tenant=demo/deployment={DEPLOYMENT}/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    for key in keys:
        target = root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return len(keys)


@pytest.fixture(scope="module")
def stored(served, shared_data, tmp_path_factory) -> Iterator[Stored]:
    folder = tmp_path_factory.mktemp("sql-e2e")
    rng = random.Random(5)
    sessions = [f"user-{i}" for i in range(25)]
    done = served.cli("capture", "import", str(shared_data / "azure_llm_inference_2023_code.csv"),
                      "--deployment", DEPLOYMENT, "--format", "azure-csv", "--revision", "r0",
                      "--start", f"{DAY}T05:00:00Z", "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stored"] == 8819
    # A jsonl file of sessions, an hour of the day and two days before it, and a day outside
    # the week (the `"date"` predicates must leave it out).
    jsonl = folder / "sessions.jsonl"
    days = (datetime(2026, 12, 2, 10, tzinfo=UTC), datetime(2026, 11, 30, 10, tzinfo=UTC),
            datetime(2026, 11, 20, 10, tzinfo=UTC))
    rows = [{k: v for k, v in _item(rng, n, days[n % 3] + timedelta(seconds=7 * n),
                                    sessions).items() if k not in ("observation_id", "deployment")}
            for n in range(300)]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = served.cli("capture", "import", str(jsonl), "--deployment", DEPLOYMENT, "--format",
                      "jsonl", "--output", "json")
    assert done.returncode == 0, done.stderr
    # The API, three batches: the second re-sends half the first (a retry: stored again, read
    # once); the third names one id of the first again with other content at an earlier arrival
    # of the same hour, accepted later: the reader keeps the earlier arrival.
    start = datetime(2026, 12, 2, 14, tzinfo=UTC)
    posted = [_item(rng, n, start + timedelta(seconds=11 * n), sessions) for n in range(200)]
    assert _post(served, posted[:120])["stored"] == 120
    assert _post(served, posted[60:])["stored"] == 140
    other = {**posted[10], "arrival": _at(start + timedelta(seconds=11 * 10 - 1)),
             "input_tokens": posted[10]["input_tokens"] + 1}
    assert _post(served, [other])["stored"] == 1

    saved = folder / "trace.json"
    done = served.cli("replay", DEPLOYMENT, "--window", "7d", "--until", UNTIL,
                      "--max-requests", "100000", "--save", str(saved), "--output", "json",
                      timeout=600)
    assert done.returncode == 0, done.stderr
    trace = json.loads(saved.read_text())
    assert trace["truncated"] is False
    assert trace["id_conflicts"] == 1  # the third batch's other content, on every build path
    segments = _download(served, folder / "bucket")
    sql = segments_sql(folder / "bucket")
    yield Stored(trace, sql, segments)
    sql.close()


def _rows(con: duckdb.DuckDBPyConnection, query: str) -> list[dict[str, Any]]:
    cur = con.execute(query)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _ours(query: str) -> str:
    """A documented query for this test's tenant and deployment, read by DuckDB."""
    return in_duckdb(query).replace("tenant = 'acme'", "tenant = 'demo'").replace(
        "deployment = 'coder'", f"deployment = '{DEPLOYMENT}'")


def _once(week: bool = True) -> str:
    """The documented "each observation once", over the week or every date stored."""
    dates = "AND \"date\" BETWEEN '2026-11-26' AND '2026-12-02'" if week else ""
    query = documented_queries()[1]
    cte = query[query.index("WITH once AS ("):query.index("\n)\n") + 3]
    assert "ORDER BY arrival_ms, ingested_at_ms, \"$path\"" in cte  # the reader's rule
    body = cte.split("WHERE tenant")[0]
    return (_ours(body) + f"WHERE tenant = 'demo' AND deployment = '{DEPLOYMENT}' {dates})\n"
            "SELECT * FROM once WHERE nth = 1")


def _records(trace: dict[str, Any], day: str | None = None) -> list[dict[str, Any]]:
    start = datetime.fromisoformat(trace["window"]["start"].replace("Z", "+00:00"))
    assert start == WEEK_START
    out = []
    for r in trace["records"]:
        at = start + timedelta(milliseconds=r["offset_ms"])
        if day is None or f"{at:%Y-%m-%d}" == day:
            out.append({**r, "hour": f"{at:%H}"})
    return out


def test_the_stack_wrote_segments_and_sql_reads_every_row_of_them(stored):
    assert stored.segments >= 5  # an import's hours, the jsonl's days, three batches
    got = stored.sql.execute("SELECT count(*), count(DISTINCT observation_id) "
                             "FROM infercrane_prod.observations").fetchone()
    # 8,819 + 300 imported, 200 + 60 re-sent + 1 other content posted.
    assert got == (8819 + 300 + 261, 8819 + 300 + 200)


def test_the_weeks_count_and_mean_tokens_in_sql_are_the_traces(stored):
    header = stored.trace
    got = _rows(stored.sql, "SELECT count(*) AS n, avg(input_tokens) AS mean_in, "
                            f"avg(output_tokens) AS mean_out FROM ({_once()})")[0]
    assert got["n"] == header["sample_count"] == 8819 + 200 + 200
    stats = header["statistics"]
    assert got["mean_in"] == pytest.approx(stats["input_tokens"]["mean"], rel=1e-12)
    assert got["mean_out"] == pytest.approx(stats["output_tokens"]["mean"], rel=1e-12)
    everything = _rows(stored.sql, f"SELECT count(*) AS n FROM ({_once(week=False)})")[0]
    assert everything["n"] == got["n"] + 100  # the day outside the week


def test_the_weeks_rows_in_sql_are_the_traces_records_one_by_one(stored):
    rows = _rows(stored.sql, f"SELECT * FROM ({_once()}) ORDER BY arrival_ms, observation_id")
    start_ms = int(WEEK_START.timestamp() * 1000)
    as_records = [{"offset_ms": r["arrival_ms"] - start_ms,
                   **{name: r[name] for name in RECORD_COLUMNS}} for r in rows]
    records = stored.trace["records"]
    assert len(as_records) == len(records)
    for mine, theirs in zip(as_records, records, strict=True):
        assert mine == theirs
    # The id named twice: the earlier arrival's content, as in the trace.
    [kept] = [r for r in rows if r["observation_id"] == f"{DEPLOYMENT}-0010"]
    assert kept["arrival_ms"] == int(datetime(2026, 12, 2, 14, 1, 49, tzinfo=UTC)
                                     .timestamp() * 1000)


def test_documented_tokens_by_hour_equal_the_traces_records(stored):
    got = _rows(stored.sql, _ours(documented_queries()[0]))
    by_hour: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _records(stored.trace, DAY):
        by_hour[r["hour"]].append(r)
    assert [r["hour"] for r in got] == sorted(by_hour) and len(by_hour) >= 3
    for row in got:
        records = by_hour[row["hour"]]
        assert row["rows_stored"] == len(records)
        assert row["requests"] == pytest.approx(sum(1 / r["sampling_rate"] for r in records))
        assert row["input_tokens"] == pytest.approx(
            sum(r["input_tokens"] / r["sampling_rate"] for r in records))
        assert row["output_tokens"] == pytest.approx(
            sum(r["output_tokens"] / r["sampling_rate"] for r in records))


def test_documented_ttft_p95_by_revision_is_a_95th_percentile_of_the_traces(stored):
    got = {r["revision"]: r for r in _rows(stored.sql, _ours(documented_queries()[1]))}
    ttft: dict[str | None, list[float]] = defaultdict(list)
    latency: dict[str | None, list[float]] = defaultdict(list)
    for r in _records(stored.trace):
        if r["outcome"] == "ok" and r["ttft_ms"] is not None:
            ttft[r["revision"]].append(r["ttft_ms"])
            latency[r["revision"]].append(r["latency_ms"])
    assert set(got) == set(ttft) == {"r0", "r1", "r2"}
    for revision, values in ttft.items():
        assert got[revision]["requests"] == len(values)
        # approx_quantile (a t-digest): a rank within two points of the 95th.
        assert is_quantile(got[revision]["ttft_p95_ms"], values, 0.95, slack=0.02), revision
        assert is_quantile(got[revision]["latency_p95_ms"], latency[revision], 0.95,
                            slack=0.02), revision


def test_documented_requests_per_session_equal_the_traces_records(stored):
    got = _rows(stored.sql, _ours(documented_queries()[2]))
    per_session = Counter(r["session_id"] for r in _records(stored.trace, DAY)
                          if r["session_id"] is not None)
    assert [(r["requests"], r["sessions"]) for r in got] == sorted(Counter(
        per_session.values()).items())
    assert sum(r["sessions"] for r in got) == len(per_session) > 10
