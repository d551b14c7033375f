"""Capacity report cost at 1x and 10x: items read and latency of a 720 h report.

    .venv/bin/python bench/capacity_scale.py [--sizes 10000,100000] [--no-dynamo]

For each size, deterministic attempts (capacity_synth, 30 days) go through the real ingest and
aggregator into an in-memory store (the port, no I/O), then:
  - memory:  the report over that store (rollup items read, tail, latency);
  - dynamo:  the aggregator's rollup items (hours and closed days) are written with the DynamoDB
             adapter into moto's CapacityTable (created from template.yaml) and the report runs on
             DynamoDB: one Query on `<tenant>#DAY` (30 whole days) plus one on `<tenant>#DIRTY`.
The aggregator itself is not run on moto here: moto answers a GSI Query by walking the whole
table, so its time would measure moto, not the design (the integration tier runs it at small n).
Latency is wall time on this machine (shared CPU) and is not a target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from tests.support.capacity_memory import MemoryCapacityStore  # noqa: E402

from infercrane.domain import capacity_synth  # noqa: E402
from infercrane.domain.capacity import CapacityService  # noqa: E402

END = datetime(2026, 11, 29, tzinfo=UTC)
NOW = END + timedelta(minutes=5)


def timed(fn, runs: int = 5):
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def dynamo_store():
    import os

    import boto3
    import requests
    from moto.server import ThreadedMotoServer

    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.capacity import DynamoCapacityStore
    from infercrane.local import resources
    from infercrane.local.template import load

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    requests.post(f"{endpoint}/moto-api/reset", timeout=30)  # moto's state is per process

    os.environ.update({"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    physical = resources.create(load(ROOT / "template.yaml"), boto3.session.Session(), endpoint,
                                "us-east-1")
    return server, DynamoCapacityStore(physical.refs["CapacityTable"],
                                       DynamoConfig("us-east-1", endpoint))


def run(n: int, with_dynamo: bool) -> dict:
    synth = capacity_synth.generate(n, seed=42, end=END, id_prefix=f"n{n}")
    store = MemoryCapacityStore()
    svc = CapacityService(store)
    t0 = time.perf_counter()
    for batch in capacity_synth.batches(synth.attempts):
        svc.ingest("acme", batch, NOW)
    ingest_s = time.perf_counter() - t0
    # Before the aggregator runs every hour is tail: the report reads every attempt.
    tail_report, tail_s = timed(lambda: svc.report("acme", "720h", END, None, NOW), runs=1)
    t0 = time.perf_counter()
    agg = svc.aggregate(NOW)
    aggregate_s = time.perf_counter() - t0
    report, mem_s = timed(lambda: svc.report("acme", "720h", END, None, NOW))
    out = {"attempts": n, "ingest_s": round(ingest_s, 2), "aggregate_s": round(aggregate_s, 2),
           "aggregate": agg.to_document(), "groups": len(report["groups"]),
           "memory_before_rollup": {"report_ms": round(tail_s * 1000, 1),
                                    "read": tail_report["read"]},
           "memory": {"report_ms": round(mem_s * 1000, 1), "read": report["read"]}}
    assert tail_report["groups"] == report["groups"]
    if with_dynamo:
        server, dstore = dynamo_store()
        try:
            from infercrane.domain.capacity import DayRollup, HourRollup

            for (tenant, hour), (version, docs) in store.rollup_items.items():
                dstore.put_rollup(HourRollup.from_group_docs(tenant, hour, version, json.loads(docs)))
            dstore.put_day_rollups([DayRollup.from_group_docs(t, day, version, json.loads(docs))
                                    for (t, day), (version, docs) in store.day_items.items()])
            dsvc = CapacityService(dstore)
            dreport, d_s = timed(lambda: dsvc.report("acme", "720h", END, None, NOW))
            assert dreport["groups"] == report["groups"]
            out["dynamo"] = {"report_ms": round(d_s * 1000, 1), "read": dreport["read"]}
        finally:
            server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--no-dynamo", action="store_true")
    args = parser.parse_args()
    rows = [run(int(s), not args.no_dynamo) for s in args.sizes.split(",")]
    print(json.dumps(rows, indent=2))
    base = rows[0]["memory"]["read"]["rollup_items"]
    for r in rows[1:]:
        assert r["memory"]["read"]["rollup_items"] <= base, "more rollup items at larger n"


if __name__ == "__main__":
    main()
