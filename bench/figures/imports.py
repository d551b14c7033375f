"""Figure 7: `infercrane capture import` at real sizes: rate and peak memory.

1. The vendored Azure code trace (8,819 rows) through the whole local stack (CLI, gateway,
   authorizer, api function, moto) on a fresh `local serve`: observations/s of wall time, the
   CLI's peak RSS, and the CPU microseconds per observation of each process (CLI; the stack
   process: gateway, moto and queue pollers; each function's execution environments), which
   say where the time goes on a shared machine and what rate two idle cores could reach.
2. A generated 50 MB Azure CSV (2024 timestamp form, ~1.3 M rows) through the CLI against a stub
   API that accepts every batch: the CLI's peak RSS (the streaming promise: <= 300 MiB) and the
   CLI's own rate. The stub stands in for the service because moto holds every item in memory
   and would take over an hour for 1.3 M rows; the service side is figure 1's.
"""

from __future__ import annotations

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

from bench.common import AZURE_CSV, Figure, checkpoint, info, main
from bench.figures.local_stack import start, stop

BIN = Path(sys.executable).parent / "infercrane"
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
               deployment: str, label: str) -> tuple[Figure, int]:
    """The Azure trace through the running stack: (rate figure, CLI peak RSS KiB)."""
    before, children_before = cpu_s(proc.pid), children_cpu_s(proc.pid)
    code, out, wall, rss, cli_cpu = run_cli(
        [str(BIN), "capture", "import", str(AZURE_CSV), "--deployment", deployment,
         "--format", "azure-csv", "--output", "json"],
        {**env, "INFERCRANE_ENDPOINT": doc["endpoint"],
         "INFERCRANE_API_KEY": doc["tenants"]["demo"]}, timeout=400)
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
        f"import: Azure 8,819 rows through the local stack{label}",
        accepted / wall if accepted else None, "obs/s",
        f"exit {code}; {accepted:,} in {wall:.1f} s wall; CPU per observation: "
        + ", ".join(f"{k} {v} us" for k, v in per_obs_us.items())
        + f" (total {total_us} us: at most {2e6 / total_us if total_us else 0:,.0f} obs/s on 2 "
        f"idle cores); load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        target=">= 5000", cpu_us_per_obs=per_obs_us), rss


def run() -> list[Figure]:
    figures: list[Figure] = []
    env = {**os.environ, "NO_COLOR": "1"}
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp_name:
        tmp = Path(tmp_name)
        proc, doc, _ = start(tmp)
        first_rss = 0
        try:
            # The first import on a fresh stack (what a user sees: it also starts the api's extra
            # execution environments), then the same file into another deployment (steady state).
            for label, deployment in (("", "bench-import"), (", warm stack", "bench-import-warm")):
                figure, rss = one_import(proc, doc, env, deployment, label)
                figures.append(figure)
                if not label:
                    first_rss = rss
        finally:
            stop(proc)
        figures.append(info("import: CLI peak RSS, Azure 8,819 rows", first_rss / 1024, "MiB",
                            "ru_maxrss of the CLI process"))
        checkpoint(figures)  # kept if the 50 MB part runs out of its time share

        big = tmp / "azure-2024-50mb.csv"
        rows = generated_azure_2024(big, TARGET_BYTES)
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
