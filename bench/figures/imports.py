"""Figure 7: `infercrane capture import` at real sizes: rate and peak memory.

1. The vendored Azure code trace (8,819 rows) through the whole local stack (CLI, gateway,
   authorizer, api function, moto) on a fresh `local serve`: observations/s of wall time, the
   CLI's peak RSS, and the CPU microseconds per observation of each process (CLI; the stack
   process: gateway, moto and queue pollers; each function's execution environments), which
   say where the time goes on a shared machine and what rate two idle cores could reach.
   Next to it, the store's floor on this machine: the observation store's `put_many` of 500-item
   batches of named observations (what an import sends: 2 items and 2 keys each) through botocore
   and moto's server with the local accommodations, client and server in one process; and the CPU
   of one DynamoDB request that carries almost nothing (one key), the cost every request pays
   whatever it holds. DynamoDB's batch limits (25 items, 100 keys) make ~0.1 requests per
   observation, so that cost bounds the rate before any item is stored. And the floor of any
   change of layout: one item per observation written blind (no read, no id claim).
2. A generated 50 MB Azure CSV (2024 timestamp form, ~1.3 M rows) through the CLI against a stub
   API that accepts every batch: the CLI's peak RSS (the streaming promise: <= 300 MiB) and the
   CLI's own rate. The stub stands in for the service because moto holds every item in memory
   and would take over an hour for 1.3 M rows; the service side is figure 1's.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import (
    AZURE_CSV,
    Figure,
    checkpoint,
    info,
    install_local_accommodations,
    main,
    template_with,
)
from bench.figures.local_stack import start, stop

BIN = Path(sys.executable).parent / "infercrane"
# KiB/s of request bodies for the big import's stack: 50,000 imported rows/s at ~0.5 KiB each.
FLEET_WORK_RATE_KIB_S = 25_600
TARGET_BYTES = int(os.environ.get("BENCH_IMPORT_BYTES", str(50 * 1000 * 1000)))


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each child of `pid` (the local stack's Lambda environments), by function:
    the artifact folder a `lambda_worker.py` process serves (`.aws-sam/build/<Function>`)."""
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) != pid:
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            name = next((Path(a).name for a in argv if "/.aws-sam/build/" in a), "other")
            out[name] = out.get(name, 0.0) + (int(stat[11]) + int(stat[12])) / os.sysconf(
                "SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return out


def run_cli(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, float, int,
                                                                          float]:
    """(exit code, stdout, wall s, peak RSS KiB, CPU s) of one CLI process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)  # noqa: S603
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        out.seek(0)
        return (os.waitstatus_to_exitcode(status), out.read().decode(), wall, usage.ru_maxrss,
                usage.ru_utime + usage.ru_stime)


def store_floor_child() -> None:
    """Run in a child process (moto's server threads stay out of the bench process): print the
    store's CPU us per named observation and per near-empty request, as JSON."""
    os.environ.update({"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",  # moto's
                       "AWS_DEFAULT_REGION": "us-east-1"})
    import logging

    from moto.server import ThreadedMotoServer

    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.observations import DynamoObservationStore
    from infercrane.domain.observation import StoredObservation

    install_local_accommodations()  # as the local stack (moto's transactions, Query, answers)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    store = DynamoObservationStore("Observations", DynamoConfig("us-east-1", url), 30)
    client = store._write._get_connection().connection.client
    client.create_table(
        TableName="Observations", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                   {"AttributeName": "sk", "KeyType": "RANGE"}])

    def batch(b: int) -> list[StoredObservation]:
        return [StoredObservation(
            tenant="demo", deployment="floor", observation_id=f"imp-{b:04d}-{i:06d}",
            arrival_ms=1_715_299_200_000 + (b * 500 + i) * 37, input_tokens=2048 + i,
            output_tokens=28, latency_ms=0.0, outcome="ok", streaming=False, sampling_rate=1.0,
            source="imported", ingested_at_ms=1_764_527_000_000,
            provenance="azure-csv:sha256:" + "ab" * 32, timing_source="modeled",
            timing_model='{"kind":"fixed"}', key_version="v1", fingerprint="f" * 43)
            for i in range(500)]

    batches = [batch(b) for b in range(13)]
    store.put_many(batches[0])  # warm: connections, code paths
    t0 = time.process_time()
    for b in batches[1:7]:
        store.put_many(b)
    per_obs = (time.process_time() - t0) / (500 * 6)
    # The barest layout any design could have: each observation one item, written blind (no read
    # of what is stored, no id claim, no condition), BatchWriteItem 25 a request through the
    # store's connection. What a change of layout could save at most; the rest of the path is not
    # in it.
    blind = [[store._attributes(o) for o in b] for b in batches[7:]]
    conn = store._write._get_connection()
    t0 = time.process_time()
    for items in blind:
        for i in range(0, len(items), 25):
            conn.batch_write_item(put_items=items[i:i + 25])
    blind_per_obs = (time.process_time() - t0) / sum(len(items) for items in blind)
    segment_per_obs = segment_floor(url, [batch(b) for b in range(13, 20)])
    key = {"pk": {"S": "demo#floor"}, "sk": {"S": "ID#none"}}
    client.batch_get_item(RequestItems={"Observations": {"Keys": [key]}})
    t0 = time.process_time()
    for _ in range(200):
        client.batch_get_item(RequestItems={"Observations": {"Keys": [key]}})
    per_request = (time.process_time() - t0) / 200
    server.stop()
    print(json.dumps({"store_us_per_obs": round(per_obs * 1e6),
                      "blind_item_us_per_obs": round(blind_per_obs * 1e6),
                      "segment_us_per_obs": round(segment_per_obs * 1e6),
                      "request_us": round(per_request * 1e6)}))


def segment_floor(url: str, batches: list[list[Any]]) -> float:
    """CPU seconds per observation of the segment layout's writes alone (issue 27): each batch's
    rows (`observation_rows.to_row`, one JSON line each) gzipped into one object per UTC hour,
    PUT with If-None-Match under `observations/tenant=/deployment=/date=/hour=/`, then one
    DynamoDB index item per object (PutItem), through botocore and moto's server in this process.
    No read, no dedup: the floor of the layout, not of its store."""
    import boto3

    from infercrane.domain.observation_rows import to_row

    session = boto3.session.Session(region_name="us-east-1")
    s3 = session.client("s3", endpoint_url=url)
    ddb = session.client("dynamodb", endpoint_url=url)
    s3.create_bucket(Bucket="floor")
    ddb.create_table(
        TableName="Segments", BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                   {"AttributeName": "sk", "KeyType": "RANGE"}])

    def write(observations: list[Any]) -> None:
        hours: dict[str, list[Any]] = {}
        for o in observations:
            hours.setdefault(time.strftime("%Y-%m-%d/%H", time.gmtime(o.arrival_ms // 1000)),
                             []).append(o)
        for hour, rows in hours.items():
            date, hh = hour.split("/")
            body = gzip.compress("".join(json.dumps(to_row(o), separators=(",", ":")) + "\n"
                                         for o in rows).encode(), compresslevel=6)
            digest = hashlib.sha256(body).hexdigest()
            key = (f"observations/tenant={rows[0].tenant}/deployment={rows[0].deployment}/"
                   f"date={date}/hour={hh}/{digest[:32]}.json.gz")
            s3.put_object(Bucket="floor", Key=key, Body=body, IfNoneMatch="*")
            ddb.put_item(TableName="Segments", Item={
                "pk": {"S": f"{rows[0].tenant}#{rows[0].deployment}#{date}"},
                "sk": {"S": f"{rows[0].arrival_ms:013d}#{digest[:32]}"},
                "key": {"S": key}, "rows": {"N": str(len(rows))},
                "bytes": {"N": str(len(body))}, "digest": {"S": digest},
                "start_ms": {"N": str(rows[0].arrival_ms)},
                "end_ms": {"N": str(rows[-1].arrival_ms)}})

    write(batches[0])  # warm: connections, code paths
    t0 = time.process_time()
    for b in batches[1:]:
        write(b)
    return (time.process_time() - t0) / sum(len(b) for b in batches[1:])


def store_floor(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", "from bench.figures.imports import store_floor_child as f; f()"],
        env=env, capture_output=True, text=True, timeout=300, check=True)
    floor: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return floor


def generated_azure_2024(path: Path, size: int) -> int:
    """A 2024-form Azure CSV of about `size` bytes (a day of arrivals, seeded); its row count."""
    rng = random.Random(7)
    rows = 0
    t_us = 1_715_299_200_000_000  # 2024-05-10T00:00:00Z
    with path.open("w", encoding="utf-8") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        while f.tell() < size:
            lines = []
            for _ in range(1000):
                t_us += rng.randint(1, 130_000)
                s, us = divmod(t_us, 1_000_000)
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s))
                lines.append(f"{stamp}.{us:06d}+00:00,{rng.randint(1, 8000)},"
                             f"{rng.randint(1, 800)}\n")
            f.write("".join(lines))
            rows += 1000
    return rows


class _Stub(BaseHTTPRequestHandler):
    """Accepts an import registration and every batch, as the service would for new rows."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/imports":
            doc: dict[str, Any] = {"status": "new", "replaced": None, "deleted": 0}
        else:
            n = len(body["items"])
            doc = {"accepted": n, "rejected": 0, "stored": n, "already_present": 0, "errors": []}
        payload = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return


def one_import(proc: subprocess.Popen[bytes], doc: dict[str, Any], env: dict[str, str],
               deployment: str, label: str, floor: dict[str, int] | None = None,
               path: Path = AZURE_CSV, what: str = "Azure 8,819 rows", timeout: int = 400,
               ) -> tuple[Figure, int]:
    """A trace file through the running stack: (rate figure, CLI peak RSS KiB)."""
    before, children_before = cpu_s(proc.pid), children_cpu_s(proc.pid)
    code, out, wall, rss, cli_cpu = run_cli(
        [str(BIN), "capture", "import", str(path), "--deployment", deployment,
         "--format", "azure-csv", "--output", "json"],
        {**env, "INFERCRANE_ENDPOINT": doc["endpoint"],
         "INFERCRANE_API_KEY": doc["tenants"]["demo"]}, timeout=timeout)
    stack_cpu = cpu_s(proc.pid) - before
    functions = {k: v - children_before.get(k, 0.0) for k, v in children_cpu_s(proc.pid).items()}
    accepted = int(json.loads(out)["accepted"]) if code == 0 else 0
    # Where the CPU went, per observation and per process (load-independent enough to say what
    # bounds the rate on a shared 2-core machine): the CLI, the stack process (gateway, moto,
    # queue pollers) and each function's environments (api, authorizer; their init included).
    per_obs = {"cli": cli_cpu, "stack (gateway+moto)": stack_cpu,
               **{k.removesuffix("Function").lower(): v for k, v in functions.items()
                  if v >= 0.01}}
    per_obs_us = {k: round(v / accepted * 1e6) for k, v in per_obs.items()} if accepted else {}
    total_us = sum(per_obs_us.values())
    return info(
        f"import: {what} through the local stack{label}",
        accepted / wall if accepted else None, "obs/s",
        f"exit {code}; {accepted:,} in {wall:.1f} s wall; CPU per observation: "
        + ", ".join(f"{k} {v} us" for k, v in per_obs_us.items())
        + f" (total {total_us} us: at most {2e6 / total_us if total_us else 0:,.0f} obs/s on 2 "
        f"idle cores); load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        + (f"; store floor here: {floor['store_us_per_obs']} us/obs in botocore + moto alone, "
           f"of which ~{floor['request_us'] // 10} us is 0.1 DynamoDB requests at "
           f"{floor['request_us']} us each; one blind item per observation (the barest layout) "
           f"{floor['blind_item_us_per_obs']} us/obs; the segment layout's floor "
           f"{floor['segment_us_per_obs']} us/obs (5,000 obs/s on 2 cores allows 400 us in "
           "all)" if floor else ""),
        target=">= 5000", cpu_us_per_obs=per_obs_us, store_floor=floor or {}), rss


def run() -> list[Figure]:
    figures: list[Figure] = []
    env = {**os.environ, "NO_COLOR": "1"}
    # Measured before the stack starts, so the two do not share the cores.
    floor = store_floor(env)
    figures.append(info(
        "import: store floor, botocore + moto in one process", floor["store_us_per_obs"],
        "us CPU/obs", f"put_many of 500 named observations (2 items + 2 keys each); a near-empty "
        f"DynamoDB request costs {floor['request_us']} us (client + server) and an import makes "
        f"~0.1 a observation (25 items / 100 keys a request): at most "
        f"{2e6 / floor['store_us_per_obs']:,.0f} obs/s on 2 idle cores for the store alone",
        store_floor=floor))
    figures.append(info(
        "import: layout floor, one item per observation written blind", floor[
            "blind_item_us_per_obs"], "us CPU/obs",
        "the barest layout: each observation one item, no read and no id claim, 25 a "
        "BatchWriteItem through the store's write routine (botocore + moto, one process): at "
        f"most {2e6 / floor['blind_item_us_per_obs']:,.0f} obs/s on 2 idle cores for the store "
        "alone, before the CLI, gateway and function that any import also runs",
        store_floor=floor))
    figures.append(info(
        "import: segment layout floor, gzip segments + one index item", floor[
            "segment_us_per_obs"], "us CPU/obs",
        "issue 27's layout written bare: a 500-observation batch's rows as one gzip JSON-Lines "
        "object per UTC hour (PUT If-None-Match) and one DynamoDB index item each, botocore + "
        f"moto in one process: at most {2e6 / max(1, floor['segment_us_per_obs']):,.0f} obs/s on "
        "2 idle cores for the store alone (5,000 obs/s on 2 cores allows 400 us in all)",
        store_floor=floor))
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp_name:
        tmp = Path(tmp_name)
        big = tmp / "azure-2024-50mb.csv"
        rows = generated_azure_2024(big, TARGET_BYTES)  # before the stack: not on its cores
        proc, doc, _ = start(tmp)
        first_rss = 0
        try:
            # The first import on a fresh stack (what a user sees: it also starts the api's extra
            # execution environments), then the same file into another deployment (steady state).
            for label, deployment in (("", "bench-import"), (", warm stack", "bench-import-warm")):
                figure, rss = one_import(proc, doc, env, deployment, label, floor)
                figures.append(figure)
                if not label:
                    first_rss = rss
        finally:
            stop(proc)
        checkpoint(figures)  # kept if the 50 MB import runs out of its time share
        # Issue 27: the generated file too, every row through the CLI, gateway, api and store
        # (the CLI's own rate, against a stub API, follows). The template's default tenant work
        # rate (TenantWorkRate 1024 KiB/s of bodies, ~2,000 imported rows/s) would measure the
        # throttle, not the path: this stack's copy raises it to what a tenant importing at
        # fleet rates sets (docs/capture.md, "Limits").
        fleet = template_with("bench-imports", {"TenantWorkRate": FLEET_WORK_RATE_KIB_S})
        proc, doc, _ = start(tmp, "--template", str(fleet))
        try:
            figures.append(one_import(
                proc, doc, env, "bench-import-big", "", floor, path=big,
                what=f"generated {big.stat().st_size / 1e6:.0f} MB Azure CSV",
                timeout=900)[0])
        finally:
            stop(proc)
        figures.append(info("import: CLI peak RSS, Azure 8,819 rows", first_rss / 1024, "MiB",
                            "ru_maxrss of the CLI process"))
        checkpoint(figures)  # kept if the stub part runs out of its time share

        server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            code, out, wall, rss, cli_cpu = run_cli(
                [str(BIN), "capture", "import", str(big), "--deployment", "bench-big",
                 "--format", "azure-csv", "--output", "json"],
                {**env, "INFERCRANE_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
                 "INFERCRANE_API_KEY": "stub"}, timeout=900)
        finally:
            server.shutdown()
        size_mb = big.stat().st_size / 1e6
        accepted = int(json.loads(out)["accepted"]) if code == 0 else 0
        figures.append(info(f"import: CLI peak RSS, generated {size_mb:.0f} MB Azure CSV",
                            rss / 1024, "MiB", f"exit {code}; {rows:,} rows, 2024 timestamp "
                            "form, against a stub API (see the module doc)", target="<= 300"))
        figures.append(info("import: CLI rate on the generated file (stub API)",
                            accepted / wall if accepted else None, "obs/s",
                            f"{accepted:,} in {wall:.1f} s wall, CLI CPU {cli_cpu:.1f} s: "
                            "two streamed passes (digest + check, then send)"))
    return figures


if __name__ == "__main__":
    main(run)
