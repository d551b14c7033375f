"""`infercrane replay DEPLOYMENT --execute ...`: run an AIPerf approximation of a trace.

The replay command applies `EXECUTE_OPTIONS` and, with `--execute`, calls `execute_replay` with
the trace document it built. Nothing is sent without `--acknowledge-cost`: the command explains
what would run and exits 3. AIPerf runs here, on the workstation or CI runner (never in a Lambda
function); the evidence (succeeded or failed, never half-written) is posted to
`POST /v1/executions` and a copy kept beside AIPerf's artifacts.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console

from infercrane import __version__
from infercrane.cli.client import CliError
from infercrane.cli.output import banner, emit, progress, stderr, table
from infercrane.clock import utcnow
from infercrane.domain.execution import (
    DEFAULT_MAX_ERROR_RATE_PCT,
    ExecutionPlan,
    Schedule,
    Target,
    build_evidence,
    check_target_url,
    new_execution_id,
    plan_execution,
)
from infercrane.errors import InvalidInput
from infercrane.ports.execution import LoadGenerator

APPROXIMATION_BANNER = (
    "APPROXIMATION: AIPerf sends synthetic prompts shaped by this trace ({method}). It does not "
    "reproduce prompt semantics, caching behaviour or exact arrival timing.")

EXECUTE_HELP_EPILOG = """\b
Execution (opt-in, cost-acknowledged):
  infercrane revision set coder-production candidate --url http://10.0.0.7:8000
  infercrane replay coder-production --execute --revision candidate        # explains, exit 3
  infercrane replay coder-production --execute --acknowledge-cost --revision candidate
  infercrane replay coder-production --execute --acknowledge-cost --revision candidate \\
      --schedule trace --time-scale 10 --max-duration 120
--schedule mean (default): --isl/--osl = the trace's means (with stddevs), --concurrency =
its peak, one request per sample (capped by --max-requests). --schedule trace: the trace's own
arrivals and prefix structure (mooncake_trace, fixed schedule)."""


def _make_runner() -> LoadGenerator:
    from infercrane.adapters.aiperf_runner import AiperfRunner

    return AiperfRunner()


# The composition root of the workstation side; tests may swap it.
make_runner: Callable[[], LoadGenerator] = _make_runner

EXECUTE_OPTIONS: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
    click.option("--execute", is_flag=True, default=False,
                 help="Run an AIPerf approximation of the trace against a revision "
                      "(nothing is sent without --acknowledge-cost)."),
    click.option("--acknowledge-cost", is_flag=True, default=False,
                 help="Confirm that the execution sends real requests to the target and may "
                      "cost money (GPU time, tokens)."),
    click.option("--revision", default=None, metavar="NAME",
                 help="Registered revision to run against (`infercrane revision set`)."),
    click.option("--target-url", default=None, metavar="URL",
                 help="Override the revision's URL (or run without a registered revision)."),
    click.option("--schedule", type=click.Choice(["mean", "trace"]), default="mean",
                 show_default=True,
                 help="mean: mean sizes at peak concurrency; trace: the trace's own arrivals."),
    click.option("--time-scale", type=click.FloatRange(min=0, max=10_000, min_open=True),
                 default=None, metavar="X",
                 help="--schedule trace: compress time X-fold (10 = ten times faster)."),
    click.option("--max-duration", type=click.FloatRange(min=0, min_open=True), default=None,
                 metavar="SECONDS",
                 help="--schedule trace: send only arrivals within this many (compressed) "
                      "seconds."),
    click.option("--max-error-rate", type=click.FloatRange(min=0, max=100),
                 default=DEFAULT_MAX_ERROR_RATE_PCT, show_default=True, metavar="PERCENT",
                 help="Above this share of failed requests the execution is recorded degraded "
                      "(or failed when none succeeded), never succeeded."),
]


def apply_execute_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(EXECUTE_OPTIONS):
        command = option(command)
    return command


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def resolve_target(ctx: click.Context, deployment: str, revision: str | None,
                   target_url: str | None) -> Target:
    if revision is None and target_url is None:
        raise CliError("--execute needs --revision NAME (see `infercrane revision set`) or "
                       "--target-url URL.", 2)
    url, model, api_key_env = target_url, None, None
    if revision is not None:
        try:
            doc = ctx.obj.api().request(
                "GET", f"/v1/deployments/{_quote(deployment)}/revisions/{_quote(revision)}")
        except CliError as exc:
            if exc.exit_code == 4:
                raise CliError(f"No revision {revision!r} is registered for {deployment}; "
                               "register it with `infercrane revision set`.", 4) from exc
            raise
        url = target_url or doc["url"]
        model, api_key_env = doc.get("model"), doc.get("api_key_env")
    try:
        checked = check_target_url(str(url), field="target_url")
    except InvalidInput as exc:
        raise CliError(f"{exc.message} (option: --target-url)", 2) from exc
    return Target(url=checked, model=model or deployment, revision=revision,
                  api_key_env=api_key_env)


def explain(plan: ExecutionPlan) -> None:
    """What would run, on stderr (stdout stays for the evidence document)."""
    s = plan.summary()
    rows = [("method", s["method"]), ("target", s["target"]["url"]),
            ("revision", s["target"]["revision"] or "(none: --target-url)"),
            ("model", s["target"]["model"]),
            ("credential from env", s["target"]["api_key_env"] or "(none)"),
            ("source trace", s["source_trace_digest"]),
            ("requests", f"{s['request_count']:,}")]
    if plan.schedule == "mean":
        rows += [("concurrency", f"{s['concurrency']} (trace peak "
                                 f"{plan.trace_peak_concurrency})"),
                 ("ISL (input tokens)", f"{s['isl']} ± {s['isl_stddev']}"),
                 ("OSL (output tokens)", f"{s['osl']} ± {s['osl_stddev']}")]
    else:
        rows += [("schedule", "the trace's arrivals (fixed schedule)"),
                 ("time scale", f"{plan.time_scale or 1:g}x faster"),
                 ("max duration", "whole trace" if plan.max_duration_s is None
                  else f"{plan.max_duration_s:g} s")]
    rows += [("estimated input tokens", f"{s['estimated_input_tokens']:,}"),
             ("estimated output tokens", f"{s['estimated_output_tokens']:,}")]
    stderr.print(table("replay execution plan (nothing sent yet)", ["setting", "value"], rows))


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (CI cancelling a job) stops AIPerf like Ctrl-C, so a failure gets recorded."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render_evidence(console: Console, doc: Mapping[str, Any]) -> None:
    console.print(APPROXIMATION_BANNER.format(method=doc["method"]))
    rows = []
    for row in doc["comparison"]:
        captured, candidate = row["captured"], row["candidate"]
        modeled = row.get("captured_timing_source") == "modeled"
        if row.get("comparable") is False:
            delta = "not comparable"
        else:
            delta = (f"{(candidate - captured) / captured * 100:+.1f}%"
                     if isinstance(captured, int | float) and isinstance(candidate, int | float)
                     and captured else "")
        rows.append((row["metric"], _cell(captured) + (" modeled" if modeled else ""),
                     _cell(candidate), delta))
    console.print(table(f"captured vs candidate ({doc['target']['revision'] or doc['target']['url']})",
                        ["metric", "captured", "candidate", "Δ"], rows))
    measured = doc.get("measured") or {}
    if measured:
        console.print(f"errors: {measured.get('error_count', 0)}  ·  "
                      f"ITL p50/p95: {_cell((measured.get('inter_token_latency_ms') or {}).get('p50'))}"
                      f" / {_cell((measured.get('inter_token_latency_ms') or {}).get('p95'))} ms  ·  "
                      f"output tokens/s: {_cell(measured.get('output_token_throughput_per_s'))}")
    console.print(f"fidelity: {doc['fidelity']['line']}")
    if any(r.get("captured_timing_source") == "modeled" for r in doc["comparison"]):
        console.print("captured timing is modeled (a service-time model, not measurements): "
                      "timing deltas against the candidate are not comparable")
    if doc["status"] in ("failed", "degraded"):
        console.print(f"{doc['status'].upper()} ({doc['failure']['kind']}): "
                      f"{doc['failure']['reason']}")
    console.print(f"evidence {doc['execution_id']} ({doc['evidence_class']}), digest "
                  f"{doc['digest']}, source trace {doc['source']['trace_digest']}")


def execute_replay(ctx: click.Context, trace: dict[str, Any], *, revision: str | None,
                   target_url: str | None, schedule: str, acknowledge_cost: bool,
                   max_requests: int | None, time_scale: float | None,
                   max_duration: float | None,
                   max_error_rate: float = DEFAULT_MAX_ERROR_RATE_PCT) -> None:
    """Explain, or (with acknowledge_cost) run, an approximation of `trace` and record evidence."""
    deployment = str(trace.get("deployment", ""))
    target = resolve_target(ctx, deployment, revision, target_url)
    chosen: Schedule = "trace" if schedule == "trace" else "mean"
    try:
        plan = plan_execution(trace, target, schedule=chosen, max_requests=max_requests,
                              time_scale=time_scale, max_duration_s=max_duration)
    except InvalidInput as exc:
        option = {"time_scale": "--time-scale", "max_duration": "--max-duration",
                  "schedule": "--schedule", "max_requests": "--max-requests"}.get(exc.field or "")
        raise CliError(exc.message + (f" (option: {option})" if option else ""), 2) from exc
    explain(plan)
    if not acknowledge_cost:
        raise CliError("Refused: an execution sends real requests to the target and may cost "
                       "money. Nothing was sent. Re-run with --acknowledge-cost to proceed.", 3)
    api_key = None
    if target.api_key_env:
        api_key = os.environ.get(target.api_key_env)
        if not api_key:
            raise CliError(f"The revision reads its API key from ${target.api_key_env}, which "
                           "is not set. Nothing was sent.", 2)
    workdir = Path(tempfile.mkdtemp(prefix="infercrane-execute-"))
    execution_id = new_execution_id()
    banner(APPROXIMATION_BANNER.format(method=plan.method))
    banner(f"execution {execution_id}: AIPerf artifacts in {workdir}")
    started = utcnow()
    with _sigterm_interrupts(), progress("AIPerf requests", plan.request_count) as advance:
        outcome = make_runner().run(plan, workdir, api_key=api_key, on_progress=advance)
    evidence = build_evidence(plan, execution_id=execution_id, started=started, ended=utcnow(),
                              outcome=outcome, build={"software": f"infercrane {__version__}"},
                              max_error_rate_pct=max_error_rate)
    saved = workdir / "evidence.json"
    saved.write_text(json.dumps(evidence, indent=2), encoding="utf-8")
    try:
        stored = ctx.obj.api().request("POST", "/v1/executions", evidence)
    except CliError as exc:
        raise CliError(f"The evidence could not be recorded ({exc.message}); a copy is in "
                       f"{saved}.", exc.exit_code) from exc
    emit(ctx, stored, render_evidence)
    if outcome.failed:
        raise CliError(f"The execution failed and was recorded as {execution_id}: "
                       f"{outcome.failure_reason}", 130 if outcome.failure_kind == "interrupted"
                       else 1)
    if evidence["status"] != "succeeded":
        raise CliError(f"The execution was recorded as {evidence['status']} ({execution_id}): "
                       f"{evidence['failure']['reason']}.", 1)
