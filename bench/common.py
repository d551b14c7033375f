"""What every figure module shares: the figure record, timing helpers, RSS, the local stack."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template.yaml"
AZURE_CSV = REPO / "tests" / "fixtures" / "traces" / "azure_llm_inference_2023_code.csv"
REGION = "us-east-1"


@dataclass
class Figure:
    """One line of the table. `target` is a bound on `value` ("<= 1.5"); None = informational."""

    name: str
    value: float | None
    unit: str
    target: str | None = None
    met: bool | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def judged(self) -> Figure:
        if self.target is None or self.value is None:
            return self
        op, _, bound = self.target.partition(" ")
        limit = float(bound)
        self.met = self.value <= limit if op == "<=" else self.value >= limit
        return self


def ratio(name: str, value: float | None, target: str | None, detail: str = "",
          **extra: Any) -> Figure:
    return Figure(name, None if value is None else round(value, 3), "x", target,
                  detail=detail, extra=extra).judged()


def info(name: str, value: float | None, unit: str, detail: str = "", target: str | None = None,
         **extra: Any) -> Figure:
    rounded = None if value is None else round(value, 3)
    return Figure(name, rounded, unit, target, detail=detail, extra=extra).judged()


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> tuple[float, Any]:
    """Median wall seconds of `fn()` over `repeat` runs after `warmup` unmeasured runs."""
    result = None
    for _ in range(warmup):
        result = fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
    return median(samples), result


def cpu_pair(a: Callable[[], Any], b: Callable[[], Any], repeat: int = 15,
             warmup: int = 2) -> tuple[float, float]:
    """Median CPU seconds of `a()` and of `b()`, sampled alternately so that load drifting on a
    shared machine weighs on both alike (CPU time is less disturbed than wall time there)."""
    for _ in range(warmup):
        a()
        b()
    sa, sb = [], []
    for _ in range(repeat):
        t0 = time.process_time()
        a()
        sa.append(time.process_time() - t0)
        t0 = time.process_time()
        b()
        sb.append(time.process_time() - t0)
    return median(sa), median(sb)


def rss_kb(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a process in KiB, from /proc (Linux)."""
    cur = peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1])
    return cur, peak


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"nproc": os.cpu_count(), "cpu": model or platform.processor(),
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_at_start": [round(x, 2) for x in load]}


def moto_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION, "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_NAMESPACE": "InferCraneBench", "POWERTOOLS_LOG_LEVEL": "WARNING"}


@dataclass
class MotoStack:
    """The template's resources in an in-process moto (`mock_aws`): no HTTP, so large data sets
    load in seconds. `container` is wired to them as a Lambda function would be."""

    env: dict[str, str]
    session: Any
    container: Any

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=REGION)


@contextmanager
def moto_stack() -> Iterator[MotoStack]:
    os.environ.update(moto_env(""))
    os.environ.pop("AWS_ENDPOINT_URL", None)
    import boto3
    from moto import mock_aws

    from infercrane.adapters.aws_session import forget_shared_session
    from infercrane.bootstrap import Container, reset_container
    from infercrane.local import moto_atomic, resources
    from infercrane.local.template import load
    from infercrane.settings import Settings

    moto_atomic.install()  # as the local stack: transactions and conditional writes atomic
    with mock_aws():
        forget_shared_session()  # a session made before the mock would send past it
        session = boto3.session.Session(region_name=REGION)
        template = load(TEMPLATE)
        # In-process moto answers the SDK's default endpoints: no endpoint URL anywhere.
        physical = resources.create(template, session, None, REGION)  # type: ignore[arg-type]
        env = resources.environment(template, physical)
        os.environ.update(env)
        container = Container(Settings.from_env(os.environ))
        reset_container(container)
        try:
            yield MotoStack(env, session, container)
        finally:
            reset_container(None)


def install_local_accommodations() -> None:
    """What the local stack installs into moto before serving (local/stack.py), for a moto
    server a bench runs itself."""
    from infercrane.local import moto_answers, moto_atomic, moto_query

    for accommodation in (moto_query, moto_answers, moto_atomic):
        accommodation.install()


_OUT: Path | None = None
_STARTED = time.perf_counter()


def checkpoint(figures: list[Figure], complete: bool = False) -> None:
    """Write what is measured so far: a group stopped at its time limit still reports it."""
    doc = {"figures": [asdict(f) for f in figures], "complete": complete,
           "seconds": round(time.perf_counter() - _STARTED, 2)}
    if _OUT is None:
        if complete:
            print(json.dumps(doc, indent=2))
        return
    partial = _OUT.with_suffix(".partial")
    partial.write_text(json.dumps(doc))
    partial.replace(_OUT)


def main(run: Callable[[], list[Figure]]) -> None:
    """Entry point of a figure module: `python -m bench.figures.X [OUT.json]`."""
    global _OUT
    _OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    checkpoint(run(), complete=True)


def template_with(folder: str, defaults: dict[str, int]) -> Path:
    """A copy of template.yaml whose only change is the named parameters' defaults, in
    `.aws-sam/<folder>/` so its relative paths (functions, layers) still resolve."""
    path = REPO / ".aws-sam" / folder / "template.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = TEMPLATE.read_text()
    for key in ("CodeUri: functions/", "ContentUri: shared/", "ContentUri: layers/"):
        name, _, rest = key.partition(" ")
        text = text.replace(key, f"{name} ../../{rest}")
    for param, value in defaults.items():
        head = f"  {param}:\n    Type: Number\n    Default: "
        start = text.index(head) + len(head)
        end = text.index("\n", start)
        text = text[:start] + str(value) + text[end:]
    path.write_text(text)
    return path
