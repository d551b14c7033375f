"""Cost per million observations and the per-key ceiling, from requests counted in a real run.

One fresh `infercrane local serve --count-requests --no-schedules` (local/counting.py counts every
request as AWS bills it: gateway requests, Lambda invocations and their measured CPU, SQS
requests in 64 KiB chunks, S3 requests by price class, DynamoDB read and write request units and
write units per partition key). Each ingest path runs into a deployment of its own, between two
snapshots of the counters (`POST /_local/counts`), until the counters stop moving:

- REST: `POST /v1/observations` in batches of 500 gateway-shaped observations (2 ms apart);
- edge: `EdgeSigner` messages of EDGE_PER_MESSAGE observations (about 20 KB: one 64 KiB SQS
  request each) sent to the capture queue, consumed as Lambda's event source mapping does (the
  local poller takes 10 messages a receive; the template's BatchSize 100 is an upper bound);
- imports: `infercrane capture import` of the Azure code trace (8,819 rows) and of the first
  BIG_BYTES of the generated 2024-form file the `imports` group uses (the same generator and seed:
  the cost per observation does not depend on the file's length).

Each path's counts are scaled to 1,000,000 observations and priced with the named constants below
(on-demand list prices, us-east-1, as of PRICES_AS_OF). Lambda GB-s = measured CPU seconds x the
function's MemorySize (template.yaml), as the brief for issue 27 defines it; AWS bills wall time
(at least the CPU). Storage is one month of what the run wrote (DynamoDB bytes as it sizes items,
S3 bytes PUT). Receives that found nothing are a poller's fixed cost, not a cost per observation:
they are reported, not priced. The ceiling: write units per observation to the hottest DynamoDB
partition key and PUTs per observation to the hottest S3 prefix, against DynamoDB's 1,000 write
units per second per partition key and S3's 3,500 PUTs per second per prefix.

This measures whatever store the stack runs: the DynamoDB item per observation today, segments
on S3 with one index item each once issue 27's store lands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import AZURE_CSV, REGION, Figure, checkpoint, info, main
from bench.figures.imports import generated_azure_2024
from bench.figures.local_stack import start, stop

BIN = Path(sys.executable).parent / "infercrane"
REST_OBSERVATIONS = int(os.environ.get("BENCH_COST_REST", "10000"))
EDGE_OBSERVATIONS = int(os.environ.get("BENCH_COST_EDGE", "10000"))
EDGE_PER_MESSAGE = 100
BIG_BYTES = int(os.environ.get("BENCH_COST_BIG_BYTES", str(800_000)))
SETTLE_S = 3.0  # counters unchanged this long: the path's asynchronous work is done
RATE = 50_000  # observations/s per deployment at which the ceiling figure reports writes/s
TARGET = 0.05  # $ per million observations, every service (issue 27)

# On-demand list prices, us-east-1, as of PRICES_AS_OF (USD).
PRICES_AS_OF = "2026-12-03"
API_GATEWAY_REST_PER_M = 3.50  # per million REST API requests (first tier)
LAMBDA_ARM_PER_GB_S = 0.0000133334  # arm64 duration
LAMBDA_PER_M_REQUESTS = 0.20
SQS_STANDARD_PER_M = 0.40  # per million requests, each 64 KiB chunk a request
S3_PUT_PER_K = 0.005  # PUT, COPY, POST, LIST per 1,000
S3_GET_PER_K = 0.0004  # GET and the rest per 1,000
S3_STORAGE_PER_GB_MONTH = 0.023  # Standard, first 50 TB
DYNAMODB_PER_M_WRU = 0.625
DYNAMODB_PER_M_RRU = 0.125
DYNAMODB_STORAGE_PER_GB_MONTH = 0.25  # Standard table class, past the free 25 GB
DYNAMODB_WCU_PER_KEY_S = 1000  # a partition key's write rate
S3_PUT_PER_PREFIX_S = 3500  # a prefix's PUT/COPY/POST/DELETE rate


def post(doc: dict[str, Any], path: str, body: Any, key: str) -> dict[str, Any]:
    """POST JSON to the local stack's gateway (an http:// URL from its ready document)."""
    req = urllib.request.Request(  # noqa: S310 - the local stack's own endpoint
        doc["endpoint"] + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310
        out: dict[str, Any] = json.loads(r.read())
    return out


def counts(doc: dict[str, Any]) -> dict[str, Any]:
    return post(doc, "/_local/counts", {}, doc["admin_key"])


def _moving(c: dict[str, Any]) -> Any:
    """What must stop changing for a path to be over (empty receives go on while idle)."""
    return (c["api_gateway"]["requests"], {k: v["invocations"] for k, v in c["lambda"].items()},
            c["s3"]["requests"], c["dynamodb"]["requests"], c["sqs"]["billed"]
            - c["sqs"]["empty_receives"])


def settled(doc: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    last, since, deadline = counts(doc), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < SETTLE_S and time.monotonic() < deadline:
        time.sleep(0.5)
        now = counts(doc)
        if _moving(now) != _moving(last):
            since = time.monotonic()
        last = now
    return last


def diff(after: Any, before: Any) -> Any:
    """after - before, key by key (a function's MemorySize is kept as it is)."""
    if isinstance(after, dict):
        return {k: v if k == "memory_mb" else diff(v, (before or {}).get(k))
                for k, v in after.items()}
    return after - (before or 0)


def price(d: dict[str, Any], observations: int) -> dict[str, float]:
    """$ per million observations by service, from one path's counted requests."""
    scale = 1e6 / observations
    gb_s = sum(f["cpu_s"] * f["memory_mb"] / 1024 for f in d["lambda"].values())
    invocations = sum(f["invocations"] for f in d["lambda"].values())
    s3 = d["s3"]["requests"]
    put_class = s3.get("PUT", 0) + s3.get("LIST", 0)
    return {k: round(v * scale, 5) for k, v in {
        "api_gateway": d["api_gateway"]["requests"] * API_GATEWAY_REST_PER_M / 1e6,
        "lambda": invocations * LAMBDA_PER_M_REQUESTS / 1e6 + gb_s * LAMBDA_ARM_PER_GB_S,
        "sqs": (d["sqs"]["billed"] - d["sqs"]["empty_receives"]) * SQS_STANDARD_PER_M / 1e6,
        "s3_requests": put_class * S3_PUT_PER_K / 1000 + s3.get("GET", 0) * S3_GET_PER_K / 1000,
        "s3_storage_month": d["s3"]["bytes_put"] / 1e9 * S3_STORAGE_PER_GB_MONTH,
        "dynamodb_requests": d["dynamodb"]["wru"] * DYNAMODB_PER_M_WRU / 1e6
        + d["dynamodb"]["rru"] * DYNAMODB_PER_M_RRU / 1e6,
        "dynamodb_storage_month": d["dynamodb"]["bytes_written"] / 1e9
        * DYNAMODB_STORAGE_PER_GB_MONTH,
    }.items()}


def hottest(d: dict[str, Any], observations: int) -> dict[str, Any]:
    keys = d["dynamodb"]["write_units_by_key"]
    prefixes = d["s3"]["put_prefixes"]
    key, wu = max(keys.items(), key=lambda kv: kv[1], default=("", 0))
    prefix, puts = max(prefixes.items(), key=lambda kv: kv[1], default=("", 0))
    wu_per_obs, puts_per_obs = wu / observations, puts / observations
    ceilings = {"dynamodb key": DYNAMODB_WCU_PER_KEY_S / wu_per_obs if wu_per_obs else None,
                "s3 prefix": S3_PUT_PER_PREFIX_S / puts_per_obs if puts_per_obs else None}
    bound = min((v for v in ceilings.values() if v), default=None)
    return {"key": key, "key_wu_per_obs": round(wu_per_obs, 5), "prefix": prefix,
            "prefix_puts_per_obs": round(puts_per_obs, 6),
            "key_wu_per_s_at_rate": round(wu_per_obs * RATE), "prefix_puts_per_s_at_rate":
            round(puts_per_obs * RATE, 1), "ceiling_obs_per_s": bound,
            "ceilings": {k: None if v is None else round(v) for k, v in ceilings.items()}}


def arrival(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def gateway_observation(i: int, deployment: str, t0: datetime) -> dict[str, Any]:
    """What a gateway captures per request: sizes, timings, a session (HMAC'd by the service)."""
    return {"deployment": deployment, "observation_id": f"{deployment}-{i:08d}",
            "arrival": arrival(t0 + timedelta(milliseconds=2 * i)),
            "input_tokens": 300 + (i * 37) % 6000, "output_tokens": 20 + (i * 13) % 700,
            "latency_ms": 400.0 + (i % 900), "ttft_ms": 40.0 + (i % 90), "streaming": True,
            "session_id": f"conversation-{i // 6}"}


def rest_path(doc: dict[str, Any], deployment: str) -> int:
    t0 = datetime.now(UTC) - timedelta(minutes=30)
    for start_i in range(0, REST_OBSERVATIONS, 500):
        items = [gateway_observation(i, deployment, t0)
                 for i in range(start_i, min(start_i + 500, REST_OBSERVATIONS))]
        body = post(doc, "/v1/observations", {"items": items}, doc["tenants"]["demo"])
        if body["accepted"] != len(items):
            raise RuntimeError(f"REST batch not accepted whole: {body}")
    return REST_OBSERVATIONS


def edge_sender(doc: dict[str, Any]) -> Callable[[str], int]:
    """Set up before the counted window (the gateway's keyring and queue URL are read once)."""
    import boto3

    from infercrane.edge import EdgeSigner

    session = boto3.session.Session(
        aws_access_key_id=doc["aws_credentials"]["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=doc["aws_credentials"]["AWS_SECRET_ACCESS_KEY"],
        region_name=REGION)
    sm = session.client("secretsmanager", endpoint_url=doc["aws_endpoint"])
    name = next(s["Name"] for s in sm.list_secrets()["SecretList"]
                if s["Name"].endswith("/tenants/demo"))
    signer = EdgeSigner.from_secret(sm.get_secret_value(SecretId=name)["SecretString"])
    sqs = session.client("sqs", endpoint_url=doc["aws_endpoint"])
    url = next(u for u in sqs.list_queues()["QueueUrls"] if u.endswith("-CaptureQueue"))

    def send(deployment: str) -> int:
        t0 = datetime.now(UTC) - timedelta(minutes=30)
        for start_i in range(0, EDGE_OBSERVATIONS, EDGE_PER_MESSAGE):
            obs = [signer.observation(**gateway_observation(i, deployment, t0))
                   for i in range(start_i, min(start_i + EDGE_PER_MESSAGE, EDGE_OBSERVATIONS))]
            sqs.send_message(QueueUrl=url, **signer.message(obs))
        return EDGE_OBSERVATIONS

    return send


def import_path(doc: dict[str, Any], path: Path, deployment: str) -> int:
    done = subprocess.run(  # noqa: S603 - our own CLI
        [str(BIN), "capture", "import", str(path), "--deployment", deployment, "--format",
         "azure-csv", "--output", "json"], capture_output=True, text=True, timeout=900,
        check=False, env={**os.environ, "NO_COLOR": "1", "INFERCRANE_ENDPOINT": doc["endpoint"],
                          "INFERCRANE_API_KEY": doc["tenants"]["demo"]})
    if done.returncode != 0:
        raise RuntimeError(f"import failed ({done.returncode}): {done.stderr[-300:]}")
    accepted: int = json.loads(done.stdout)["accepted"]
    return accepted


def describe(d: dict[str, Any], observations: int) -> str:
    per_k = 1000 / observations
    ddb, s3, sqs = d["dynamodb"], d["s3"], d["sqs"]
    fns = ", ".join(f"{k.removesuffix('Function')} {v['invocations'] * per_k:.2f} inv + "
                    f"{v['cpu_s'] * per_k * 1000:.0f} ms CPU"
                    for k, v in d["lambda"].items() if v["invocations"])
    return (f"per 1,000 observations: API Gateway {d['api_gateway']['requests'] * per_k:.2f} "
            f"requests; Lambda {fns}; SQS {(sqs['billed'] - sqs['empty_receives']) * per_k:.2f} "
            f"billed requests; S3 " + (", ".join(f"{k} {v * per_k:.2f}" for k, v in
                                                  sorted(s3['requests'].items()) if v) or "none")
            + f" ({s3['bytes_put'] * per_k / 1024:.1f} KiB put); DynamoDB "
            f"{ddb['wru'] * per_k:.0f} WRU, {ddb['rru'] * per_k:.0f} RRU, "
            f"{sum(ddb['requests'].values()) * per_k:.1f} requests, "
            f"{ddb['bytes_written'] * per_k / 1024:.0f} KiB written")


def run() -> list[Figure]:
    figures: list[Figure] = []
    totals: dict[str, float] = {}
    total_obs = 0
    ceilings: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp_name:
        tmp = Path(tmp_name)
        big = tmp / "azure-2024-head.csv"
        big_rows = generated_azure_2024(big, BIG_BYTES)
        proc, doc, _ = start(tmp, "--count-requests", "--no-schedules")
        try:
            send_edge = edge_sender(doc)
            paths: list[tuple[str, str, Callable[[], int]]] = [
                ("REST batches of 500", "cost-rest", lambda: rest_path(doc, "cost-rest")),
                (f"edge SQS messages of {EDGE_PER_MESSAGE}", "cost-edge",
                 lambda: send_edge("cost-edge")),
                ("import, Azure code trace", "cost-azure",
                 lambda: import_path(doc, AZURE_CSV, "cost-azure")),
                ("import, generated 2024-form CSV", "cost-big",
                 lambda: import_path(doc, big, "cost-big")),
            ]
            for label, deployment, go in paths:
                before = settled(doc)
                observations = go()
                d = diff(settled(doc), before)
                priced = price(d, observations)
                total = sum(priced.values())
                for k, v in priced.items():
                    totals[k] = totals.get(k, 0.0) + v * observations / 1e6
                total_obs += observations
                heat = hottest(d, observations)
                ceilings.append((label, heat))
                source = f" (the first {big_rows:,} rows of the generator)" if (
                    deployment == "cost-big") else ""
                figures.append(info(
                    f"cost: {label}, $ per million observations", total, "$",
                    f"{observations:,} observations{source}; by service: " + ", ".join(
                        f"{k} ${v:.4f}" for k, v in priced.items() if v)
                    + f"; {describe(d, observations)}; idle receives (fixed cost, not priced) "
                    f"{d['sqs']['empty_receives']}", target=f"<= {TARGET}",
                    observations=observations, by_service=priced, counted=d, hottest=heat,
                    prices_as_of=PRICES_AS_OF))
                checkpoint(figures)
        finally:
            stop(proc)
    if total_obs:
        all_priced = {k: round(v * 1e6 / total_obs, 5) for k, v in totals.items()}
        figures.append(info(
            "cost: every ingest path together, $ per million observations",
            sum(all_priced.values()), "$", f"{total_obs:,} observations over the paths above; "
            + ", ".join(f"{k} ${v:.4f}" for k, v in all_priced.items() if v)
            + f"; on-demand list prices, us-east-1, {PRICES_AS_OF}", target=f"<= {TARGET}",
            by_service=all_priced, prices_as_of=PRICES_AS_OF))
    bounded = [(label, h) for label, h in ceilings if h["ceiling_obs_per_s"]]
    if bounded:
        label, worst = min(bounded, key=lambda lh: lh[1]["ceiling_obs_per_s"])
        figures.append(info(
            "ceiling: observations/s per deployment before a per-key or per-prefix limit",
            worst["ceiling_obs_per_s"], "obs/s",
            f"hottest path {label}: {worst['key_wu_per_obs']} write units/observation to "
            f"DynamoDB key {worst['key']!r} (limit {DYNAMODB_WCU_PER_KEY_S}/s), "
            f"{worst['prefix_puts_per_obs']} PUTs/observation to S3 prefix "
            f"{worst['prefix'] or '-'!r} (limit {S3_PUT_PER_PREFIX_S}/s); at {RATE:,} obs/s: "
            f"{worst['key_wu_per_s_at_rate']:,} WCU/s and {worst['prefix_puts_per_s_at_rate']:,} "
            "PUT/s; every path: " + "; ".join(f"{lb} {h['ceilings']}" for lb, h in ceilings),
            target=f">= {RATE}", paths=dict(ceilings)))
    return figures


if __name__ == "__main__":
    main(run)
