"""`make bench`: run every figure group in its own process, print one table, write results.json.

Each group is `bench/figures/<name>.py`; a group that fails or overruns its time share is
reported as not measured, and the others still run. `python bench/run.py [GROUP ...]` runs only
the named groups. Not part of `make test`: timings never gate a test run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import Figure, machine  # noqa: E402

# (group, seconds kept for it: what it takes on the loaded 2-core reference machine). The whole
# run stays under TOTAL_S: the first group gets what the later ones leave, and a group that runs
# out of time is stopped (keeping what it measured so far).
GROUPS: list[tuple[str, int]] = [
    ("cold_start", 420),
    ("capture", 20),
    ("dynamo_writes", 40),
    ("capacity", 85),
    ("local_stack", 50),
    ("imports", 720),
    ("trace_build_memory", 180),
    ("local_volumes", 450),
    ("throttle", 120),
    ("newcomer", 240),
    ("costs", 300),
    ("segment_traces", 600),
]
# The shares above add up to 3,225 s; the default leaves a margin for process start-up.
TOTAL_S = int(os.environ.get("BENCH_TOTAL_S", "3330"))
RESULTS = REPO / "bench" / "results.json"


def run_group(name: str, limit_s: int, tmp: Path) -> tuple[list[Figure], float, str | None]:
    out = tmp / f"{name}.json"
    # This checkout's package first, even when the venv's editable install points at another.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "shared")])}
    t0 = time.perf_counter()
    try:
        argv = [sys.executable, "-m", f"bench.figures.{name}", str(out)]
        # Its own process group: a group stopped at its limit takes its children with it
        # (`local serve`, cold-start processes), and nothing else.
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,  # noqa: S603
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        stdout, stderr = proc.communicate(timeout=limit_s)
        done: subprocess.CompletedProcess[str] | None = subprocess.CompletedProcess(
            argv, proc.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        done = None
    took = time.perf_counter() - t0
    if done is None:
        partial = json.loads(out.read_text())["figures"] if out.exists() else []
        return [Figure(**f) for f in partial], took, f"stopped after {limit_s} s"
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return [], took, f"failed (exit {done.returncode}): {tail[0][:300]}"
    doc = json.loads(out.read_text())
    return [Figure(**f) for f in doc["figures"]], took, None


def fmt_value(f: Figure) -> str:
    if f.value is None:
        return "n/a"
    if f.unit == "x":
        return f"{f.value:.2f}x"
    if abs(f.value) >= 100:
        return f"{f.value:,.0f} {f.unit}"
    return f"{f.value:.3g} {f.unit}"


def print_table(figures: list[Figure], info: dict[str, Any]) -> None:
    rows = [(f.name, fmt_value(f), f.target or "", {True: "yes", False: "NO", None: ""}[f.met])
            for f in figures]
    head = ("figure", "value", "target", "met")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    print(f"InferCrane bench on {info['nproc']} x {info['cpu']}, Python {info['python']}")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print(line)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print(line)
    judged = [f for f in figures if f.met is not None]
    print(f"{sum(1 for f in judged if f.met)} of {len(judged)} targets met; details in "
          f"{RESULTS.relative_to(REPO)}")
    for f in figures:
        if f.detail:
            print(f"  - {f.name}: {f.detail}")


def kept_from_last_run(wanted: set[str]) -> tuple[list[Figure], dict[str, Any],
                                                  dict[str, Any] | None]:
    """When only some groups run, the other groups' figures and status from results.json stay
    (each figure names its group in `extra.group`; older ones are matched by name instead), and
    so does the machine line they were measured on: each re-run group records its own."""
    if not wanted or not RESULTS.exists():
        return [], {}, None
    last = json.loads(RESULTS.read_text())
    groups = {k: v for k, v in last.get("groups", {}).items() if k not in wanted}
    figures = [Figure(**f) for f in last.get("figures", [])
               if (f.get("extra") or {}).get("group") not in wanted]
    return figures, groups, last.get("machine")


def main(argv: list[str]) -> int:
    wanted = set(argv)
    info = machine()
    figures, groups, kept_machine = kept_from_last_run(wanted)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="infercrane-bench-") as tmp:
        chosen = [(n, s) for n, s in GROUPS if not wanted or n in wanted]
        for i, (name, _) in enumerate(chosen):
            later = sum(s for _, s in chosen[i + 1:])
            limit = max(30, int(TOTAL_S - (time.perf_counter() - started) - later))
            if not (REPO / "bench" / "figures" / f"{name}.py").exists():
                groups[name] = {"status": "not written yet"}
                continue
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            got, took, problem = run_group(name, limit, Path(tmp))
            groups[name] = {"seconds": round(took, 1), "status": problem or "ok"}
            if kept_machine is not None:  # a partial run: this group's own machine and load
                groups[name]["machine"] = info
            if problem:
                got.append(Figure(f"{name}: not (fully) measured", None, "", None, None, problem))
            for f in got:
                f.extra["group"] = name
            fresh = {f.name for f in got}
            figures = [f for f in figures if f.name not in fresh] + got
            print(f"bench: {name} {took:.0f} s {problem or ''}", file=sys.stderr, flush=True)
    info["seconds"] = round(time.perf_counter() - started, 1)
    RESULTS.write_text(json.dumps({"machine": kept_machine or info, "groups": groups,
                                   "figures": [asdict(f) for f in figures]}, indent=2) + "\n")
    print_table(figures, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
