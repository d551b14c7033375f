"""Figure 6: the local stack (`infercrane local serve`): time to ready, and its peak RSS idle and
while the Azure code trace (8,819 requests) is imported through it with the CLI.

Ready time is spawn -> ready line written (moto, resources from template.yaml, tenants, warm API
and authorizer environments), the median over fresh processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import AZURE_CSV, Figure, info, main, median, rss_kb

BIN = Path(sys.executable).parent / "infercrane"
STARTS = int(os.environ.get("BENCH_STACK_STARTS", "3"))


def start(tmp: Path, *extra: str) -> tuple[subprocess.Popen[bytes], dict[str, Any], float]:
    ready = tmp / f"ready-{time.monotonic_ns()}.json"
    t0 = time.perf_counter()
    argv = [str(BIN), "local", "serve", "--tenant", "demo", "--ready-file", str(ready), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,  # noqa: S603 - our own argv
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (ready.exists() and ready.read_text().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("infercrane local serve did not become ready")
        time.sleep(0.01)
    return proc, json.loads(ready.read_text()), time.perf_counter() - t0


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run() -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ready_s = []
        for _ in range(STARTS - 1):
            proc, _, took = start(tmp)
            ready_s.append(took)
            stop(proc)
        proc, doc, took = start(tmp)
        ready_s.append(took)
        try:
            time.sleep(2.0)  # idle: schedules and queue pollers running, no requests
            idle_rss, idle_peak = rss_kb(proc.pid)
            samples: list[int] = []
            done = threading.Event()

            def sample() -> None:
                while not done.wait(0.05):
                    try:
                        samples.append(rss_kb(proc.pid)[0])
                    except OSError:
                        return

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            env = {**os.environ, "INFERCRANE_ENDPOINT": doc["endpoint"],
                   "INFERCRANE_API_KEY": doc["tenants"]["demo"], "NO_COLOR": "1"}
            t0 = time.perf_counter()
            imported = subprocess.run(  # noqa: S603 - our own argv
                [str(BIN), "capture", "import", str(AZURE_CSV), "--deployment", "bench-azure",
                 "--format", "azure-csv", "--output", "json"],
                env=env, capture_output=True, text=True, timeout=400, check=False)
            import_s = time.perf_counter() - t0
            done.set()
            sampler.join()
            _, peak = rss_kb(proc.pid)
        finally:
            stop(proc)
    figures.append(info("local stack: time to ready", median(ready_s), "s",
                        f"median of {len(ready_s)} fresh `infercrane local serve` starts "
                        f"({', '.join(f'{s:.2f}' for s in ready_s)} s)"))
    figures.append(info("local stack: RSS idle", idle_rss / 1024, "MiB",
                        f"2 s after ready; peak so far {idle_peak / 1024:.0f} MiB"))
    if imported.returncode not in (0, 2):
        figures.append(info("local stack: peak RSS during Azure import", None, "MiB",
                            f"import failed (exit {imported.returncode}): "
                            f"{imported.stderr.strip()[-300:]}"))
        return figures
    result = json.loads(imported.stdout) if imported.stdout.strip() else {}
    accepted = int(result.get("accepted", 0))
    figures.append(info("local stack: peak RSS during Azure import", peak / 1024, "MiB",
                        f"VmHWM; sampled max during import {max(samples or [0]) / 1024:.0f} MiB, "
                        f"{accepted:,} accepted / {result.get('rejected', '?')} rejected in "
                        f"{import_s:.1f} s"))
    figures.append(info("local stack: Azure import through CLI + HTTP", accepted / import_s,
                        "obs/s", f"{accepted:,} observations of {AZURE_CSV.name} in "
                        f"{import_s:.1f} s (CLI, gateway, authorizer, api, moto in one box)"))
    return figures


if __name__ == "__main__":
    main(run)
