"""The local stack at real volumes: a 20,000-request trace build and the capacity aggregate tick
over 20,000 lifecycle attempts spread across 30 days, each through the CLI and HTTP against a
fresh `infercrane local serve`.

Observations are written straight into the stack's store with the segment adapter (segments in
the documents bucket, their index items in ObservationsTable: the layout the stack reads; the
import path has its own figures); attempts go through `POST /v1/lifecycle-attempts` in
batches of 500, as `infercrane lifecycle import` sends them. Targets (issue 16): the build
<= 30 s, the aggregate tick plus the 720 h report <= 60 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import Figure, info, main
from bench.figures.local_stack import BIN, start, stop

TENANT = "demo"
DEPLOYMENT = "bench-volume"
REQUESTS = int(os.environ.get("BENCH_VOLUME_REQUESTS", "20000"))
ATTEMPTS = int(os.environ.get("BENCH_VOLUME_ATTEMPTS", "20000"))
UNTIL = datetime(2026, 11, 29, tzinfo=UTC)


def table(aws: str, word: str) -> str:
    import boto3

    names = boto3.client("dynamodb", endpoint_url=aws, region_name="us-east-1"
                         ).list_tables()["TableNames"]
    return next(n for n in names if word in n)


def load_observations(aws: str, n: int) -> None:
    import boto3

    from infercrane.adapters.segments.store import SegmentObservationStore
    from infercrane.domain.observation import StoredObservation

    s3 = boto3.client("s3", endpoint_url=aws, region_name="us-east-1")
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "documentsbucket" in b["Name"])
    store = SegmentObservationStore(
        s3, boto3.client("dynamodb", endpoint_url=aws, region_name="us-east-1"), bucket,
        table(aws, "Observations"), 30)
    end_ms = int(UNTIL.timestamp() * 1000)
    step = 3_600_000 / n
    observations = [StoredObservation(
        tenant=TENANT, deployment=DEPLOYMENT, observation_id=f"o-{i:07d}",
        arrival_ms=end_ms - 3_600_000 + int(i * step), input_tokens=1500 + (i * 37) % 4000,
        output_tokens=20 + (i * 13) % 400, latency_ms=300.0 + (i * 7) % 2000,
        ttft_ms=50.0 + i % 90, outcome="ok", streaming=True, sampling_rate=1.0,
        source="captured", ingested_at_ms=end_ms, session_id=f"v1:{i // 4:064x}",
        prefix_block_ids=[f"b{(i // 8) * 3 + j}" for j in range(3)], prefix_block_size=512,
        key_version="v1") for i in range(n)]
    for i in range(0, n, 1000):
        store.put_many(observations[i:i + 1000])


def post_attempts(endpoint: str, api_key: str, n: int) -> None:
    from infercrane.domain import capacity_synth

    synth = capacity_synth.generate(n, seed=42, end=UTC_END, id_prefix="bench")
    for batch in capacity_synth.batches(synth.attempts):
        request = urllib.request.Request(  # noqa: S310 - loopback stack
            f"{endpoint}/v1/lifecycle-attempts", data=json.dumps({"items": batch}).encode(),
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
            method="POST")
        with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310
            response.read()


UTC_END = UNTIL - timedelta(minutes=10)
SETTLE_S = 31  # CapacityService's settle time (bootstrap.py: 30 s), and a second


def cli(env: dict[str, str], *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    done = subprocess.run([str(BIN), *args], env=env, capture_output=True,  # noqa: S603
                          text=True, timeout=900, check=False)
    return time.perf_counter() - t0, done


def run() -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp_name:
        proc, doc, _ = start(Path(tmp_name))
        try:
            env = {**os.environ, "INFERCRANE_ENDPOINT": doc["endpoint"],
                   "INFERCRANE_API_KEY": doc["tenants"][TENANT], "NO_COLOR": "1"}
            # The stack's moto authorizes every request: this process loads as its operator.
            os.environ.update(doc["aws_credentials"])
            load_observations(doc["aws_endpoint"], REQUESTS)
            took, done = cli(env, "--output", "json", "replay", DEPLOYMENT, "--window", "1h",
                             "--until", UNTIL.isoformat(), "--max-requests", str(REQUESTS))
            count = json.loads(done.stdout)["sample_count"] if done.returncode == 0 else None
            figures.append(info(
                f"local stack: trace build, {REQUESTS:,} requests", took if count else None, "s",
                f"`infercrane replay --max-requests {REQUESTS}` through HTTP; {count} records"
                if count else f"failed: {done.stderr.strip()[-300:]}", target="<= 30"))
            t0 = time.perf_counter()
            post_attempts(doc["endpoint"], doc["tenants"][TENANT], ATTEMPTS)
            ingest_s = time.perf_counter() - t0
            # The aggregator keeps a mark younger than 30 s (the hour index, a GSI, may not show
            # the newest attempts yet), so a tick right after the ingest would leave every hour
            # dirty and the report would read them all as tail. The schedule runs every 15
            # minutes; the wait for the marks to settle is not counted.
            time.sleep(SETTLE_S)
            tick_s, ticked = cli(env, "--admin-key", doc["admin_key"], "--output", "json",
                                 "local", "tick", "aggregate")
            report_s, report = cli(env, "--output", "json", "capacity", "--window", "720h",
                                   "--until", UNTIL.isoformat())
            ok = ticked.returncode == 0 and report.returncode == 0
            figures.append(info(
                f"local stack: aggregate tick + 720 h report, {ATTEMPTS:,} attempts",
                tick_s + report_s if ok else None, "s",
                f"tick {tick_s:.1f} s + report {report_s:.1f} s (ingest through the API "
                f"{ingest_s:.1f} s and the {SETTLE_S} s wait for its marks to settle, not "
                f"counted)" if ok else
                f"failed: {(ticked.stderr + report.stderr).strip()[-300:]}", target="<= 60"))
        finally:
            stop(proc)
    return figures


if __name__ == "__main__":
    main(run)
