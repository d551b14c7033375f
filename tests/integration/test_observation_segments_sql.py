"""An SQL engine reads the observation segments as Athena would, and agrees with plain Python.

Segments are laid out as the writer lays them in the documents bucket (gzip JSON Lines, one
`to_row` per line, under `observations/tenant=<t>/deployment=<d>/date=<YYYY-MM-DD>/hour=<HH>/`)
in a directory; DuckDB reads them with the columns generated from the one row schema
(`local/sql_schema.py`, the same that template.yaml's Glue table holds) and answers counts, token
sums, means and TTFT p95 by revision. The oracle is plain Python over the observations stored,
never DuckDB or the code under test. docs/capture.md's three Athena queries run here too (DuckDB's
`approx_quantile` for Athena's `approx_percentile`, `filename` for its `"$path"`), so the
documented SQL is proven to run and to answer what Python counts.

Re-sent copies and ids naming two contents are written too, so the documented "each observation
once" is held to the reader's rule (adapters/segments/reading.py), stated here by hand: per id, the
earliest arrival, then the earliest ingested. tests/e2e/test_observation_sql_e2e.py reads segments
the local stack wrote and holds the same queries to the trace the service builds from them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean
from typing import Any

import duckdb
import pytest

from infercrane.adapters.segments.layout import PREFIX, Segment, decode
from infercrane.adapters.segments.reading import SegmentRead
from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import to_row
from infercrane.local.sql_schema import duckdb_columns, duckdb_hive_types

REPO = Path(__file__).resolve().parents[2]
DAY = "2026-12-02"
WEEK = ("2026-11-26", "2026-12-02")  # docs/capture.md's queries name these
TENANTS = ("acme", "globex")
DEPLOYMENTS = ("coder", "chat")
# Two days inside the documented week, one outside it (the date predicate must drop it).
DATES = ("2026-11-20", "2026-12-01", DAY)
REVISIONS = ("r1", "r2", None)


@dataclass(frozen=True)
class SegmentTree:
    root: Path  # holds observations/tenant=…/…/<segment id>.json.gz, as the bucket does
    stored: list[StoredObservation]  # one per observation id: the copy the reader's rule keeps
    copies: int  # rows written in all, re-sent copies and conflicting contents included


def _observations(rng: random.Random) -> list[StoredObservation]:
    sessions = ["v1:" + hashlib.sha256(f"session-{i}".encode()).hexdigest() for i in range(60)]
    out = []
    for tenant in TENANTS:
        for deployment in DEPLOYMENTS:
            for n in range(500):
                day = rng.choice(DATES)
                hour = rng.choice((0, 7, 13, 23))
                start = datetime.fromisoformat(f"{day}T{hour:02d}:00:00+00:00")
                arrival = int(start.timestamp() * 1000) + rng.randrange(3_600_000)
                outcome = rng.choices(("ok", "server_error", "timeout"), (90, 7, 3))[0]
                streaming = rng.random() < 0.8
                session = rng.choice(sessions) if rng.random() < 0.7 else None
                out.append(StoredObservation(
                    tenant=tenant, deployment=deployment,
                    observation_id=f"req-{tenant}-{deployment}-{n:04d}", arrival_ms=arrival,
                    input_tokens=rng.randrange(1, 8000), output_tokens=rng.randrange(0, 1200),
                    latency_ms=round(rng.uniform(50, 30_000), 3), outcome=outcome,
                    streaming=streaming, sampling_rate=rng.choice((1.0, 0.5, 0.25)),
                    source="captured", ingested_at_ms=arrival + rng.randrange(10, 5_000),
                    revision=rng.choice(REVISIONS),
                    ttft_ms=round(rng.uniform(20, 2_000), 3) if streaming and outcome == "ok"
                    else None,
                    session_id=session, key_version="v1" if session else None,
                    prefix_block_ids=(session,) if session and rng.random() < 0.3 else None,
                    prefix_block_size=512 if session else None))
    return out


def _partition(obs: StoredObservation) -> str:
    arrival = datetime.fromtimestamp(obs.arrival_ms / 1000, UTC)
    return (f"{PREFIX}tenant={obs.tenant}/deployment={obs.deployment}/"
            f"date={arrival:%Y-%m-%d}/hour={arrival:%H}")


def write_segments(root: Path, batch: Iterable[StoredObservation]) -> int:
    """One segment per partition the batch touches, its id derived from its content (as the
    writer's are: the same rows never make two objects) and its rows in (arrival, id) order (as
    the writer's are, and the reader merges them); returns the rows written."""
    by_key: dict[str, list[StoredObservation]] = defaultdict(list)
    for obs in batch:
        by_key[_partition(obs)].append(obs)
    written = 0
    for prefix, rows in by_key.items():
        rows.sort(key=lambda o: (o.arrival_ms, o.observation_id))
        body = "".join(json.dumps(to_row(o), separators=(",", ":")) + "\n" for o in rows).encode()
        folder = root / prefix
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{hashlib.sha256(body).hexdigest()[:32]}.json.gz").write_bytes(
            gzip.compress(body, mtime=0))
        written += len(rows)
    return written


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> SegmentTree:
    rng = random.Random(27)
    observations = _observations(rng)
    root = tmp_path_factory.mktemp("bucket")
    written = 0
    for start in range(0, len(observations), 250):  # accepted batches of 250
        written += write_segments(root, observations[start:start + 250])
    # A client re-sends a fifth of them later: the same observations, ingested again, land in
    # other segments.
    resent = [StoredObservation(**{**o.__dict__, "ingested_at_ms": o.ingested_at_ms + 60_000})
              for o in rng.sample(observations, len(observations) // 5)]
    # And a client's bug: a twentieth of the ids named again with other content, in the same
    # hour, at the same arrival or another, accepted before or after the first. Keeping the
    # earliest ingested would keep the wrong one whenever the earlier arrival was ingested later.
    conflicting = []
    for o in rng.sample(observations, len(observations) // 20):
        hour = o.arrival_ms - o.arrival_ms % 3_600_000
        arrival = o.arrival_ms if rng.random() < 0.3 else hour + rng.randrange(3_600_000)
        conflicting.append(StoredObservation(**{
            **o.__dict__, "arrival_ms": arrival, "output_tokens": o.output_tokens + 1,
            "ingested_at_ms": o.ingested_at_ms + rng.choice((-1, 1)) * rng.randrange(1, 5_000)}))
    written += write_segments(root, resent) + write_segments(root, conflicting)
    # The reader's rule (reading.py), by hand: per id, the earliest arrival, then the earliest
    # ingested (no two copies here tie on both).
    kept: dict[tuple[str, str, str], StoredObservation] = {}
    for o in [*observations, *resent, *conflicting]:
        key = (o.tenant, o.deployment, o.observation_id)
        if key not in kept or (o.arrival_ms, o.ingested_at_ms) < (kept[key].arrival_ms,
                                                                  kept[key].ingested_at_ms):
            kept[key] = o
    assert sum(k.output_tokens != o.output_tokens for k, o in zip(
        kept.values(), observations, strict=True)) > 10  # conflicts the other content won
    return SegmentTree(root, list(kept.values()), written)


def segments_sql(root: Path) -> duckdb.DuckDBPyConnection:
    """DuckDB with `infercrane_prod.observations`: the segments under `root` (laid out as the
    bucket is), read with the generated columns (as template.yaml's Glue table, database
    `infercrane_<StageName>`, declares them) and each row's file (Athena's `"$path"`)."""
    con = duckdb.connect()
    files = (root / PREFIX).as_posix() + "/*/*/*/*/*.json.gz"
    con.execute("CREATE SCHEMA infercrane_prod")
    con.execute(
        "CREATE VIEW infercrane_prod.observations AS SELECT * FROM read_json("
        f"'{files}', format = 'newline_delimited', compression = 'gzip', "
        f"hive_partitioning = true, filename = true, columns = {_struct(duckdb_columns())}, "
        f"hive_types = {_struct(duckdb_hive_types())})")
    return con


@pytest.fixture(scope="module")
def sql(segments: SegmentTree) -> Iterator[duckdb.DuckDBPyConnection]:
    con = segments_sql(segments.root)
    yield con
    con.close()


def _struct(mapping: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in mapping.items()) + "}"


def _rows(con: duckdb.DuckDBPyConnection, query: str, *params: Any) -> list[dict[str, Any]]:
    cur = con.execute(query, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _once(tenant: str, deployment: str, dates: tuple[str, str]) -> str:
    """Each observation once (the documented rule) in one deployment's dates."""
    return ("SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY observation_id "
            "ORDER BY arrival_ms, ingested_at_ms, filename) AS nth "
            "FROM infercrane_prod.observations "
            f"WHERE tenant = '{tenant}' AND deployment = '{deployment}' "
            f"AND \"date\" BETWEEN '{dates[0]}' AND '{dates[1]}') WHERE nth = 1")


def _day(obs: StoredObservation) -> str:
    return f"{datetime.fromtimestamp(obs.arrival_ms / 1000, UTC):%Y-%m-%d}"


def _in(stored: list[StoredObservation], tenant: str, deployment: str,
        dates: tuple[str, str]) -> list[StoredObservation]:
    return [o for o in stored if o.tenant == tenant and o.deployment == deployment
            and dates[0] <= _day(o) <= dates[1]]


def is_quantile(value: float, values: list[float], q: float, slack: float = 0.0) -> bool:
    """Whether `value` is a q-quantile of `values` (at least q of them ≤ it, at least 1 − q ≥ it),
    `slack` of the ranks allowed either way for an approximate one."""
    n = len(values)
    below = sum(v <= value for v in values) / n
    above = sum(v >= value for v in values) / n
    return below >= q - slack and above >= (1 - q) - slack


def test_every_row_written_is_read_with_a_column_of_the_schema(segments, sql):
    written = sum(1 for path in segments.root.rglob("*.json.gz")
                  for _ in gzip.decompress(path.read_bytes()).splitlines())
    assert written == segments.copies > len(segments.stored)
    keys = {key for o in segments.stored for key in to_row(o)}
    assert keys <= set(duckdb_columns()), keys - set(duckdb_columns())  # nothing read as absent
    assert sql.execute("SELECT count(*) FROM infercrane_prod.observations").fetchone() == (written,)


def test_counts_and_means_by_deployment_equal_python_over_the_stored_observations(segments, sql):
    everything = ("2000-01-01", "2099-12-31")
    for tenant in TENANTS:
        for deployment in DEPLOYMENTS:
            expected = _in(segments.stored, tenant, deployment, everything)
            got = _rows(sql, "SELECT count(*) AS n, avg(input_tokens) AS mean_in, "
                             "avg(output_tokens) AS mean_out, sum(1 / sampling_rate) AS traffic, "
                             "count(DISTINCT session_id) AS sessions "
                             f"FROM ({_once(tenant, deployment, everything)})")[0]
            assert got["n"] == len(expected)
            assert got["mean_in"] == pytest.approx(fmean(o.input_tokens for o in expected))
            assert got["mean_out"] == pytest.approx(fmean(o.output_tokens for o in expected))
            assert got["traffic"] == pytest.approx(sum(1 / o.sampling_rate for o in expected))
            assert got["sessions"] == len({o.session_id for o in expected if o.session_id})


def test_a_tenants_query_reads_only_its_own_rows(segments, sql):
    ids = {r["observation_id"] for r in _rows(
        sql, "SELECT DISTINCT observation_id FROM infercrane_prod.observations "
             "WHERE tenant = ? AND deployment = ?", "acme", "coder")}
    assert ids == {o.observation_id for o in segments.stored
                   if o.tenant == "acme" and o.deployment == "coder"}


def test_sql_keeps_the_row_the_segment_reader_keeps_whatever_ties_the_copies_make(tmp_path):
    """Copies of one id written in batches of one hour, at one arrival or another, accepted
    before, after or in the same millisecond as each other: the documented dedup keeps, row for
    row, what the service's own reader (reading.py, the trace's) keeps from the same objects."""
    rng = random.Random(7)
    hour = int(datetime.fromisoformat(f"{DAY}T07:00:00+00:00").timestamp() * 1000)

    def copy(n: int, content: int, arrival: int, ingested: int) -> StoredObservation:
        return StoredObservation(
            tenant="acme", deployment="coder", observation_id=f"req-{n:03d}", arrival_ms=arrival,
            input_tokens=100 + n, output_tokens=content, latency_ms=50.0, outcome="ok",
            streaming=False, sampling_rate=1.0, source="captured", ingested_at_ms=ingested,
            # As capture's: over the content, arrival included, never the ingest time.
            fingerprint=hashlib.sha256(f"{n}/{content}/{arrival}".encode()).hexdigest())

    batches: list[list[StoredObservation]] = [[] for _ in range(6)]
    for n in range(300):
        arrival = hour + rng.randrange(3_600_000)
        for _ in range(rng.choice((1, 2, 3))):  # copies: re-sent (same content) or conflicting
            batches[rng.randrange(6)].append(copy(
                n, rng.choice((1, 2)), rng.choice((arrival, hour + rng.randrange(3_600_000))),
                hour + 4_000_000 + rng.choice((0, 0, 1, 2))))  # ties on ingest are common
    for batch in batches:  # a batch stores one row per id (the writer refuses the others)
        unique: dict[str, StoredObservation] = {}
        for o in batch:
            unique.setdefault(o.observation_id, o)
        write_segments(tmp_path, unique.values())
    written = [o for path in (tmp_path / PREFIX).rglob("*.json.gz")
               for o in decode("acme", "coder", path.read_bytes())]
    contents: dict[tuple[str, int, int], set[int]] = defaultdict(set)
    for o in written:
        contents[(o.observation_id, o.arrival_ms, o.ingested_at_ms)].add(o.output_tokens)
    assert sum(len(c) > 1 for c in contents.values()) > 5  # ties only the segment id breaks
    files = sorted((tmp_path / PREFIX).rglob("*.json.gz"))
    # The index's order (first arrival, segment id); stored_at_ms reversed to show it unread.
    segments = []
    for i, path in enumerate(files):
        arrivals = [o.arrival_ms for o in decode("acme", "coder", path.read_bytes())]
        segments.append(Segment(
            "acme", "coder", seg_id=path.name.removesuffix(".json.gz"),
            key=path.relative_to(tmp_path).as_posix(), rows=len(arrivals),
            bytes=path.stat().st_size, min_arrival_ms=min(arrivals),
            max_arrival_ms=max(arrivals),
            sha256=hashlib.sha256(path.read_bytes()).hexdigest(), stored_at_ms=-i, expires_at=2**40))
    segments.sort(key=lambda seg: (seg.min_arrival_ms, seg.seg_id))
    read = SegmentRead(segments, lambda seg: (tmp_path / seg.key).read_bytes(), 0, 2**42)
    expected = [(o.observation_id, o.arrival_ms, o.output_tokens, o.ingested_at_ms)
                for o in read]
    assert read.counts.duplicates > 20 and read.counts.conflicts > 20
    con = segments_sql(tmp_path)
    got = [tuple(r.values()) for r in _rows(
        con, "SELECT observation_id, arrival_ms, output_tokens, ingested_at_ms "
             f"FROM ({_once('acme', 'coder', (DAY, DAY))}) ORDER BY arrival_ms, observation_id")]
    con.close()
    assert got == expected


def test_ttft_p95_by_revision_is_a_95th_percentile_of_python_s_values(segments, sql):
    got = {r["revision"]: r for r in _rows(
        sql, "SELECT revision, count(ttft_ms) AS n, quantile_disc(ttft_ms, 0.95) AS p95 "
             f"FROM ({_once('acme', 'coder', WEEK)}) GROUP BY revision")}
    expected: dict[str | None, list[float]] = defaultdict(list)
    for o in _in(segments.stored, "acme", "coder", WEEK):
        if o.ttft_ms is not None:
            expected[o.revision].append(o.ttft_ms)
    assert set(got) == set(expected) == set(REVISIONS)
    for revision, values in expected.items():
        assert got[revision]["n"] == len(values) >= 50
        assert is_quantile(got[revision]["p95"], values, 0.95), revision


# -- docs/capture.md's queries ------------------------------------------------------------------


def documented_queries() -> list[str]:
    text = (REPO / "docs" / "capture.md").read_text(encoding="utf-8")
    section = text[text.index("## Querying your shapes with SQL"):]
    queries = re.findall(r"```sql\n(.*?)```", section, flags=re.DOTALL)
    assert len(queries) == 3, "docs/capture.md should show three queries"
    return queries


def in_duckdb(athena_sql: str) -> str:
    """Athena's (Trino's) SQL as DuckDB reads it: only the approximate percentile's name and the
    row's file (a hidden column in Athena, `read_json(filename = true)`'s in DuckDB) differ."""
    return athena_sql.replace("approx_percentile(", "approx_quantile(").replace(
        '"$path"', "filename")


def test_documented_tokens_by_hour_query_runs_and_equals_python(segments, sql):
    got = _rows(sql, in_duckdb(documented_queries()[0]))
    day = _in(segments.stored, "acme", "coder", (DAY, DAY))
    by_hour: dict[str, list[StoredObservation]] = defaultdict(list)
    for o in day:
        by_hour[f"{datetime.fromtimestamp(o.arrival_ms / 1000, UTC):%H}"].append(o)
    assert [r["hour"] for r in got] == sorted(by_hour)
    for row in got:
        rows = by_hour[row["hour"]]
        assert row["rows_stored"] == len(rows)
        assert row["requests"] == pytest.approx(sum(1 / o.sampling_rate for o in rows))
        assert row["input_tokens"] == pytest.approx(sum(o.input_tokens / o.sampling_rate
                                                        for o in rows))
        assert row["output_tokens"] == pytest.approx(sum(o.output_tokens / o.sampling_rate
                                                         for o in rows))


def test_documented_ttft_p95_by_revision_query_runs_and_is_a_95th_percentile(segments, sql):
    got = {r["revision"]: r for r in _rows(sql, in_duckdb(documented_queries()[1]))}
    ttft: dict[str | None, list[float]] = defaultdict(list)
    latency: dict[str | None, list[float]] = defaultdict(list)
    for o in _in(segments.stored, "acme", "coder", WEEK):
        if o.outcome == "ok" and o.ttft_ms is not None:
            ttft[o.revision].append(o.ttft_ms)
            latency[o.revision].append(o.latency_ms)
    assert set(got) == set(ttft)
    for revision, values in ttft.items():
        assert got[revision]["requests"] == len(values)
        # approx_quantile (a t-digest) is approximate: a rank within two points of the 95th.
        assert is_quantile(got[revision]["ttft_p95_ms"], values, 0.95, slack=0.02), revision
        assert is_quantile(got[revision]["latency_p95_ms"], latency[revision], 0.95,
                            slack=0.02), revision


def test_documented_requests_per_session_query_runs_and_equals_python(segments, sql):
    got = _rows(sql, in_duckdb(documented_queries()[2]))
    per_session = Counter(o.session_id for o in _in(segments.stored, "acme", "coder", (DAY, DAY))
                          if o.session_id is not None)
    expected = Counter(per_session.values())
    assert [(r["requests"], r["sessions"]) for r in got] == sorted(expected.items())
    assert sum(r["sessions"] for r in got) == len(per_session) > 10
