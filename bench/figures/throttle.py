"""Throttling by work on the local stack: another tenant's latency while one tenant floods.

One tenant (the victim) sends a one-observation batch every 100 ms; its p95 is measured alone
(baseline) and then while another tenant floods 500-observation batches (~160 KiB each) at
50 requests a second, far under the usage plan's 200/s, as in issue 26 (the flood that took a
victim's p50 from 22 to 395 ms with 0 x 429 when tenants were charged per request). Figure: the
victim's p95 under the flood / its p95 alone, measured in one run (target <= 2), and how much of
the flood was refused (429 with Retry-After) and admitted.

The stack runs a copy of template.yaml whose only change is TenantWorkRate/TenantWorkBurst, sized
to the local stack: one 500-observation batch at once and 8 KiB/s (one batch per 20 s, ~25
observations/s). The victim's p50 is unchanged at any rate; its p95 is set by how often an
admitted batch occupies the stack's one Python process (moto and the gateway share it: ~0.5 s of
CPU per batch), so at 48 KiB/s (one batch per 3.3 s) it measured 3.6-4.5x under load 9 from
other sessions (docs/architecture.md). On AWS the same code enforces the template's own numbers.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import Figure, checkpoint, main, ratio, template_with
from bench.figures.local_stack import BIN, stop

WORK_RATE_KIB_S = int(os.environ.get("BENCH_WORK_RATE_KIB_S", "8"))
WORK_BURST_KIB = 160  # one 500-observation batch at once
PHASE_S = float(os.environ.get("BENCH_THROTTLE_PHASE_S", "20"))
FLOOD_RPS = 50
FLOOD_THREADS = 4


def bench_template() -> Path:
    """template.yaml with the bench's work rate, beside the build folder so its paths resolve."""
    return template_with("bench-throttle", {"TenantWorkRate": WORK_RATE_KIB_S,
                                            "TenantWorkBurst": WORK_BURST_KIB})


def batch(prefix: str, n: int) -> bytes:
    start = datetime.now(UTC) - timedelta(minutes=30)
    return json.dumps({"items": [
        {"observation_id": f"{prefix}-{i:06d}", "deployment": "bench-throttle",
         "arrival": (start + timedelta(milliseconds=37 * i)).isoformat().replace("+00:00", "Z"),
         "input_tokens": 2048 + i % 977, "output_tokens": 28 + i % 61,
         "cached_input_tokens": 1024, "ttft_ms": 120.5 + i % 13, "latency_ms": 850.25 + i % 97,
         "outcome": "ok", "streaming": True, "session_id": f"session-{i // 4}",
         "shared_prefix_id": f"system-prompt-{i % 3}"} for i in range(n)]}).encode()


def post(endpoint: str, key: str, body: bytes) -> tuple[int, str | None]:
    request = urllib.request.Request(f"{endpoint}/v1/observations", data=body, method="POST",  # noqa: S310
                                     headers={"Authorization": f"Bearer {key}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310
            resp.read()
            return resp.status, None
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, exc.headers.get("Retry-After")


def victim_p95(endpoint: str, key: str, seconds: float, tag: str) -> tuple[float, float, int]:
    """(p95 ms, p50 ms, samples) of one-item batches sent every 100 ms."""
    samples, errors = [], 0
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        status, _ = post(endpoint, key, batch(f"{tag}{i}", 1))
        took = time.perf_counter() - t0
        if status != 200:
            errors += 1
        samples.append(took * 1000)
        i += 1
        time.sleep(max(0.0, 0.1 - took))
    cuts = statistics.quantiles(samples, n=20)
    return cuts[18], statistics.median(samples), errors


def flood(endpoint: str, key: str, stop_at: float, counts: dict[str, int],
          lock: threading.Lock) -> None:
    body = batch(f"flood{threading.get_ident()}", 500)
    interval = FLOOD_THREADS / FLOOD_RPS
    next_at = time.monotonic()
    while time.monotonic() < stop_at:
        status, retry_after = post(endpoint, key, body)
        with lock:
            counts[str(status)] = counts.get(str(status), 0) + 1
            if status == 429 and retry_after:
                counts["with_retry_after"] = counts.get("with_retry_after", 0) + 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def flood_process(endpoint: str, key: str, seconds: float,
                  results: multiprocessing.Queue[dict[str, int]]) -> None:
    counts: dict[str, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    threads = [threading.Thread(target=flood, args=(endpoint, key, stop_at, counts, lock))
               for _ in range(FLOOD_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(counts)


def start_stack(tmp: Path, template: Path) -> tuple[Any, dict[str, Any]]:
    import subprocess

    ready = tmp / "ready.json"
    proc = subprocess.Popen(  # noqa: S603 - our own argv
        [str(BIN), "local", "serve", "--tenant", "victim", "--tenant", "flood", "--no-schedules",
         "--template", str(template), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300  # the copy's artifacts may be built first
    while not (ready.exists() and ready.read_text().endswith("\n")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("infercrane local serve did not become ready")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def run() -> list[Figure]:
    import tempfile

    figures: list[Figure] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp:
        proc, doc = start_stack(Path(tmp), bench_template())
        try:
            endpoint, keys = doc["endpoint"], doc["tenants"]
            victim_p95(endpoint, keys["victim"], 2.0, "warm")  # environments warm
            base95, base50, base_err = victim_p95(endpoint, keys["victim"], PHASE_S, "base")
            # The flood comes from a process of its own, as another tenant's client would: its
            # threads do not hold this process's interpreter while the victim is timed.
            results: multiprocessing.Queue[dict[str, int]] = multiprocessing.Queue()
            flooder = multiprocessing.Process(target=flood_process,
                                              args=(endpoint, keys["flood"], PHASE_S + 1.0,
                                                    results))
            flooder.start()
            time.sleep(0.5)  # the flood under way
            flood95, flood50, flood_err = victim_p95(endpoint, keys["victim"], PHASE_S, "flood")
            counts = results.get(timeout=120)
            flooder.join()
        finally:
            stop(proc)
    sent = sum(v for k, v in counts.items() if k.isdigit())
    admitted = counts.get("200", 0)
    figures.append(ratio(
        "throttle: victim p95 under another tenant's flood / alone", flood95 / base95, "<= 2",
        f"one-item batch every 100 ms: p95 {flood95:.0f} vs {base95:.0f} ms alone (p50 {flood50:.0f} "
        f"vs {base50:.0f}); flood of 500-item batches at {FLOOD_RPS}/s: {sent} sent, {admitted} "
        f"admitted ({admitted * 500 / (PHASE_S + 1):,.0f} obs/s), {counts.get('429', 0)} x 429 "
        f"({counts.get('with_retry_after', 0)} with Retry-After); TenantWorkRate "
        f"{WORK_RATE_KIB_S} KiB/s, burst {WORK_BURST_KIB} KiB; load average {load:.1f} at start",
        victim_p95_ms=round(flood95, 1), victim_baseline_p95_ms=round(base95, 1),
        victim_errors=base_err + flood_err, flood=counts))
    checkpoint(figures)
    return figures


if __name__ == "__main__":
    main(run)
