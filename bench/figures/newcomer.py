"""The local stack through a newcomer's path: its memory (every process of it), a 720 h capacity
report over 20,000 fresh attempts, and how fast it stops.

One fresh `infercrane local serve`: both public traces in /work/shared/data (or the vendored
copies in tests/fixtures/traces) imported with the CLI, a full trace built of each, a report
written; then 20,000 lifecycle attempts posted as `infercrane lifecycle import` sends them and
`infercrane capacity --window 720h` asked at once, before any aggregate tick (the tail a
newcomer's first report reads); then SIGTERM and the time until the process has exited. RSS is
summed over the stack's process and all its descendants (moto, execution environments,
emulators), sampled every 0.2 s. Targets (issue 28): RSS < 1 GiB, report <= 10 s, stop <= 5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.common import REPO, Figure, checkpoint, info, main
from bench.figures.local_stack import start
from bench.figures.local_volumes import cli, post_attempts

DATA = Path(os.environ.get("INFERCRANE_SHARED_DATA", "/work/shared/data"))
if not DATA.is_dir():
    DATA = REPO / "tests" / "fixtures" / "traces"
ATTEMPTS = int(os.environ.get("BENCH_NEWCOMER_ATTEMPTS", "20000"))


def tree_rss_kb(root: int) -> int:
    """RSS of `root` and every descendant, in KiB (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def run() -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp_name:
        tmp = Path(tmp_name)
        proc, doc, _ = start(tmp)
        peak = [0]
        done_sampling = threading.Event()

        def sample() -> None:
            while not done_sampling.wait(0.2):
                peak[0] = max(peak[0], tree_rss_kb(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        env = {**os.environ, "INFERCRANE_ENDPOINT": doc["endpoint"],
               "INFERCRANE_API_KEY": doc["tenants"]["demo"], "NO_COLOR": "1"}
        steps = [
            ("capture", "import", str(DATA / "azure_llm_inference_2023_code.csv"),
             "--deployment", "nc-azure", "--format", "azure-csv"),
            ("capture", "import", str(DATA / "mooncake_fast25_synthetic_trace.jsonl"),
             "--deployment", "nc-mooncake", "--format", "mooncake-jsonl",
             "--start", "2026-11-30T00:00:00Z"),
            ("replay", "nc-azure", "--window", "2h", "--until", "2023-11-16T20:00:00Z",
             "--max-requests", "20000"),
            ("replay", "nc-mooncake", "--window", "2h", "--until", "2026-11-30T02:00:00Z",
             "--max-requests", "20000"),
            ("report", "--deployment", "nc-azure", "--window", "2h",
             "--until", "2023-11-16T20:00:00Z", "--max-requests", "20000",
             "--out", str(tmp / "report.html")),
        ]
        try:
            failed = []
            t0 = time.perf_counter()
            for step in steps:
                _, done = cli(env, *step)
                if done.returncode != 0:
                    failed.append(f"{' '.join(step[:2])}: exit {done.returncode} "
                                  f"{done.stderr.strip()[-200:]}")
            path_s = time.perf_counter() - t0
            after = tree_rss_kb(proc.pid)
            figures.append(info(
                "local stack: RSS of all its processes after the newcomer path", after / 1024,
                "MiB", f"peak {peak[0] / 1024:.0f} MiB (sampled every 0.2 s); both public traces "
                f"imported, a full trace of each, a report, in {path_s:.0f} s"
                + (f"; FAILED: {failed}" if failed else ""), target="<= 1024",
                peak_mib=round(peak[0] / 1024, 1)))
            checkpoint(figures)
            t0 = time.perf_counter()
            post_attempts(doc["endpoint"], doc["tenants"]["demo"], ATTEMPTS)
            ingest_s = time.perf_counter() - t0
            report_s, report = cli(env, "capacity", "--window", "720h", "--output", "json")
            figures.append(info(
                f"local stack: 720 h capacity report over {ATTEMPTS:,} fresh attempts",
                report_s if report.returncode == 0 else None, "s",
                f"`infercrane capacity --window 720h` at once after posting them ({ingest_s:.0f} s),"
                f" before any aggregate tick: every attempt is read as the tail" if
                report.returncode == 0 else f"failed: {report.stderr.strip()[-300:]}",
                target="<= 10"))
            checkpoint(figures)
            figures.append(info("local stack: RSS of all its processes at the end",
                                tree_rss_kb(proc.pid) / 1024, "MiB",
                                f"peak {peak[0] / 1024:.0f} MiB over the whole run"))
        finally:
            done_sampling.set()
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
                stop_s: float | None = time.perf_counter() - t0
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                stop_s = None
        figures.append(info("local stack: stop time after the newcomer path", stop_s, "s",
                            "SIGTERM to the process's exit, its environments and moto included",
                            target="<= 5"))
    return figures


if __name__ == "__main__":
    main(run)
