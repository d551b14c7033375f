"""`make demo`: the service end to end on the local stack, through the CLI as a user would.

Each step prints the command it runs and what the command printed, so the demo doubles as a
tutorial. It stops at the first failing step with that step's exit code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from infercrane.local import provider_emulators
from infercrane.local.provider_emulators import demo_prefetch
from infercrane.local.stack import LocalStack, find_template


@dataclass
class Demo:
    stack: LocalStack
    workdir: Path
    repo: Path

    @property
    def traces(self) -> Path:
        return self.repo / "tests" / "fixtures" / "traces"

    def env(self, tenant: str = "demo") -> dict[str, str]:
        env = {**os.environ, "INFERCRANE_ENDPOINT": self.stack.endpoint,
               "INFERCRANE_API_KEY": self.stack.api_keys[tenant],
               "INFERCRANE_ADMIN_KEY": self.stack.admin_key,
               # The commands' output is captured (not a terminal): give their tables room.
               "COLUMNS": str(max(150, shutil.get_terminal_size().columns))}
        return env

    def run(self, *args: str, tenant: str = "demo", show: bool = True) -> str:
        exe = Path(sys.executable).parent / "infercrane"
        argv = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else
                ["-m", "infercrane.cli.main"]), *args]
        click.secho("$ infercrane " + " ".join(_short(a, self.workdir) for a in args), fg="cyan")
        done = subprocess.run(argv, env=self.env(tenant), capture_output=True, text=True,  # noqa: S603
                              check=False)
        if show and done.stdout.strip():
            click.echo(done.stdout.rstrip())
        if done.returncode != 0:
            click.echo(done.stderr.rstrip(), err=True)
            raise SystemExit(done.returncode)
        return done.stdout


def _short(arg: str, workdir: Path) -> str:
    return arg.replace(str(workdir), "$DEMO")


def step(title: str) -> None:
    click.echo()
    click.secho(f"== {title}", bold=True)


def capture(demo: Demo) -> None:
    step("Capture: import a real hour of production code-completion traffic (shape only)")
    start = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    demo.run("capture", "import", str(demo.traces / "azure_llm_inference_2023_code.csv"),
             "--deployment", "coder-production", "--format", "azure-csv",
             "--start", start.strftime("%Y-%m-%dT%H:%M:%SZ"))
    click.echo("Importing the same file again stores nothing new:")
    demo.run("capture", "import", str(demo.traces / "azure_llm_inference_2023_code.csv"),
             "--deployment", "coder-production", "--format", "azure-csv",
             "--start", start.strftime("%Y-%m-%dT%H:%M:%SZ"), "--output", "json")


def replay(demo: Demo) -> None:
    step("Replay trace: a canonical, digest-addressed window of what was captured")
    trace_file = demo.workdir / "coder-production.trace.json"
    mooncake = demo.workdir / "coder-production.mooncake.jsonl"
    demo.run("replay", "coder-production", "--window", "3h", "--max-requests", "20000",
             "--save", str(trace_file), "--export-aiperf", str(mooncake))
    demo.run("trace", "verify", str(trace_file))


def capacity(demo: Demo) -> None:
    step("Capacity intelligence: this tenant's lifecycle attempts, grouped and classified")
    from infercrane.domain.capacity_synth import generate

    attempts = demo.workdir / "lifecycle-attempts.jsonl"
    # Three days of attempts keep the local aggregator (moto walks its indexes) to seconds.
    synthetic = generate(2000, seed=7, end=datetime.now(UTC), hours=72)
    attempts.write_text("".join(json.dumps(a) + "\n" for a in synthetic.attempts))
    click.echo(f"(2,000 generated attempts over 3 days with provider error codes from "
               f"provider-errors.md, written to {_short(str(attempts), demo.workdir)})")
    demo.run("lifecycle", "import", str(attempts))
    demo.run("local", "tick", "aggregate", show=False)
    demo.run("capacity", "--window", "720h")
    demo.run("capacity", "--window", "720h", "--group-by", "adapter,gpu")


def report(demo: Demo) -> None:
    step("Capture a second deployment: the Mooncake trace, whose requests carry prefix blocks")
    start = (datetime.now(UTC) - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    demo.run("capture", "import", str(demo.traces / "mooncake_fast25_synthetic_trace.jsonl"),
             "--deployment", "chat-production", "--format", "mooncake-jsonl",
             "--start", start.strftime("%Y-%m-%dT%H:%M:%SZ"), show=False)
    step("Trace drift: does the chat traffic have the shape of the coder traffic?")
    coder = json.loads((demo.workdir / "coder-production.trace.json").read_text())["digest"]
    chat = json.loads(demo.run("replay", "chat-production", "--window", "2h", "--max-requests",
                               "20000", "--output", "json", show=False))["digest"]
    demo.run("trace", "compare", coder[7:19], chat[7:19])
    step("Placement advice: where this tenant's own attempts say H100s come up")
    demo.run("capacity", "advise", "--gpu", "H100", "--window", "720h")
    step("Report: one self-contained HTML file of traffic shape, capacity and cache state")
    # Kept after the demo (the work directory is not): the point is to open it.
    out = Path(tempfile.mkdtemp(prefix="infercrane-report-")) / "report.html"
    demo.run("report", "--deployment", "chat-production", "--window", "2h",
             "--model-digest", provider_emulators.DEMO_MODEL, "--out", str(out), show=False)
    click.secho(f"Report written to {out} (open it in a browser; it needs no network)",
                fg="green")


STEPS: list[Callable[[Demo], None]] = [capture, replay, capacity, demo_prefetch, report]


def run_demo(keep: bool = False) -> None:
    template = find_template()
    workdir = Path(tempfile.mkdtemp(prefix="infercrane-demo-"))
    click.secho("InferCrane demo: everything below runs on this machine (moto for AWS); "
                "nothing reaches a cloud.", bold=True)
    provider_emulators.register()
    with LocalStack(template, tenants=["demo", "other"], run_schedules=False,
                    log_level="ERROR") as stack:
        step("Local stack")
        click.echo(json.dumps({"endpoint": stack.endpoint, "aws_endpoint": stack.aws_endpoint,
                               "tenants": sorted(stack.api_keys)}))
        demo = Demo(stack, workdir, template.parent)
        for fn in STEPS:
            fn(demo)
    if keep:
        click.echo(f"\nDemo files kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    click.secho("\nDemo finished.", bold=True, fg="green")
