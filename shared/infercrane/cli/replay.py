"""`infercrane replay DEPLOYMENT`: build a replay trace from what was captured.

It only reads persisted observations: it sends no workload and creates no infrastructure.
Options that act on the trace afterwards (saving, exporting, and later executing) run in
`after_build`, one step each, so new ones slot in without touching the build.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from infercrane.cli.client import CliError
from infercrane.cli.execute import apply_execute_options, execute_replay
from infercrane.cli.output import banner, emit, progress
from infercrane.cli.sidecar import save_signed_export, write_sidecar
from infercrane.cli.trace import announce_aiperf, fetch_document, render_header
from infercrane.cli.verify import SIDECAR_SUFFIX
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.trace_select import DEFAULT_METHOD, LOW_COVERAGE, METHODS
from infercrane.domain.windows import MAX_REQUESTS_LIMIT, parse_until, parse_window
from infercrane.errors import InvalidInput

# A large window reads many observations; the service side is bounded by the API's own timeout.
BUILD_TIMEOUT_S = 600.0
NOTICE = ("replay only reads what was captured: it sends no workload and creates no "
          "infrastructure.")
EXECUTE_NOTICE = ("building the trace only reads what was captured; --execute then sends an "
                  "AIPerf approximation of it to the target (never a reproduction).")

EPILOG = """\b
Examples:
  infercrane replay coder-production --window 24h --max-requests 1000
  infercrane replay coder-production --window 7d --until 2026-11-29T00:00:00Z --output json
  infercrane replay coder-production --window 30m --save trace.json --export-aiperf trace.jsonl
  infercrane trace verify trace.json
  infercrane replay coder-production --window 24h --execute --revision candidate
  infercrane replay coder-production --window 24h --execute --acknowledge-cost --revision candidate

Windows: a whole number and m, h or d (30m, 24h, 7d, 720h), ending at --until (default now).
When the window holds more than --max-requests, --select chooses which contiguous slice the
trace keeps (the trace says truncated, and its `selection` records the slice's span, the
sessions left out and its KS distances to the whole window):

\b
  representative  the slice whose input-token, output-token and inter-arrival distributions
                  are closest to the whole window's (default)
  busiest         the slice with the highest arrival rate (a peak to size for)
  head            the earliest requests

A slice never cuts a session: one that continues outside it is left out whole. stderr warns
when the slice spans under 10 % of the window's traffic. A window of more than 10,000
observations is built asynchronously: the command shows the records read so far on stderr
while it waits, then prints the same result.
--export-aiperf writes AIPerf's mooncake_trace JSONL (aiperf profile --input-file
F --custom-dataset-type mooncake_trace). --save and --export-aiperf also write the service's
signed attestation beside the file (FILE.intoto.jsonl); check either with `infercrane trace
verify FILE`."""


def _check(window: str, until: str | None) -> str | None:
    try:
        parse_window(window)
        return None if until is None else parse_until(until).isoformat()
    except InvalidInput as exc:
        raise CliError(f"{exc.message} (option: --{exc.field})", 2) from exc


# How often the CLI asks an asynchronous build how far it got.
POLL_INTERVAL_S = 1.0


# What to do after a synchronous build hit API Gateway's 29 s (replay and report both say it).
BUILD_TIMEOUT_HINT = ("The build did not finish within API Gateway's 29 s: retry, or pass "
                      "--max-requests above the service's synchronous limit (10,000 requests by "
                      "default) to build the trace asynchronously.")


def wait_for_build(api: Any, accepted: dict[str, Any]) -> dict[str, Any]:
    """Poll an asynchronous build (202 from POST /v1/traces), showing records read on stderr,
    until it has a trace header; a failed build is an error."""
    banner(f"the window is large: building it asynchronously (build {accepted['build_id']})")
    seen = 0
    status = accepted
    with progress("reading observations", int(accepted["max_requests"])) as advance:
        while status["status"] not in ("succeeded", "failed"):
            time.sleep(POLL_INTERVAL_S)
            status = api.request("GET", accepted["status_path"])
            read = int(status.get("records_read") or 0)
            if read > seen:
                advance(read - seen)
                seen = read
    if status["status"] == "failed":
        error = status.get("error") or {}
        # Exit as the synchronous answer would: a window that emptied while queued is "not
        # found" (4); the same data refused (e.g. a slice of cut sessions) is the caller's (2).
        code = {"not_found": 4, "invalid_input": 2}.get(str(error.get("code")), 1)
        raise CliError(f"The trace build failed: {error.get('message', 'unknown error')}", code,
                       status)
    header: dict[str, Any] = status["trace"]
    return header


def warn_low_coverage(header: dict[str, Any]) -> None:
    selection = header.get("selection") or {}
    coverage = selection.get("coverage")
    if coverage is not None and coverage < LOW_COVERAGE:
        banner(f"warning: the {selection['method']} slice spans {coverage:.1%} of the window's "
               f"traffic ({header['sample_count']:,} of {selection['window_requests']:,} "
               "requests): it may not stand for the whole window; raise --max-requests or "
               "shorten --window.")


def after_build(ctx: click.Context, header: dict[str, Any], save: Path | None,
                export_aiperf: Path | None) -> None:
    if save is None and export_aiperf is None:
        return
    body = fetch_document(ctx, header["digest"])
    api = ctx.obj.api()
    if save is not None:
        save.write_bytes(body)
        envelope = api.request("GET", f"/v1/traces/{header['digest']}/attestation")
        write_sidecar(save, envelope)
        banner(f"saved the trace document to {save} (signed attestation: {save}{SIDECAR_SUFFIX})")
    if export_aiperf is not None:
        exported = mooncake_jsonl(json.loads(body)).encode("utf-8")
        save_signed_export(api, header["digest"], export_aiperf, exported)
        banner(f"wrote {header['sample_count']:,} mooncake_trace rows to {export_aiperf} "
               f"(signed attestation: {export_aiperf}{SIDECAR_SUFFIX})")
        announce_aiperf(json.loads(body), export_aiperf)


@click.command("replay", epilog=EPILOG)
@click.argument("deployment")
@click.option("--window", default="24h", show_default=True, help="How far back from --until.")
@click.option("--max-requests", default=1000, show_default=True,
              type=click.IntRange(1, MAX_REQUESTS_LIMIT), help="Keep at most this many.")
@click.option("--select", type=click.Choice(METHODS), default=DEFAULT_METHOD, show_default=True,
              help="Which slice of a window holding more than --max-requests to keep "
                   "(see below).")
@click.option("--until", default=None, metavar="ISO", help="Window end, RFC 3339 (default now).")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the whole trace document (JSON) to this file.")
@click.option("--export-aiperf", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write AIPerf mooncake_trace JSONL to this file.")
@apply_execute_options
@click.pass_context
def command(ctx: click.Context, deployment: str, window: str, max_requests: int,
            select: str, until: str | None, save: Path | None, export_aiperf: Path | None,
            execute: bool, acknowledge_cost: bool, revision: str | None,
            target_url: str | None, schedule: str, time_scale: float | None,
            max_duration: float | None, max_error_rate: float) -> None:
    """Build a replay trace of DEPLOYMENT from its captured observations.

    Prints a summary (statistics and a histogram of arrivals); --output json prints the trace
    header. It only reads what was captured: it sends no workload and creates no infrastructure.

    With --execute (and --acknowledge-cost) the trace then shapes an AIPerf run against a
    registered revision: an approximation of the captured mean sizes and peak concurrency (or,
    with --schedule trace, of its arrival schedule), recorded as evidence of class approximation.
    """
    until_iso = _check(window, until)
    banner(EXECUTE_NOTICE if execute else NOTICE)
    body: dict[str, Any] = {"deployment": deployment, "window": window,
                            "max_requests": max_requests, "select": select}
    if until_iso is not None:
        body["until"] = until_iso
    api = ctx.obj.api()
    api.timeout_s = max(api.timeout_s, BUILD_TIMEOUT_S)
    header = api.request("POST", "/v1/traces", body, on_timeout=BUILD_TIMEOUT_HINT)
    if "build_id" in header:
        header = wait_for_build(api, header)
    warn_low_coverage(header)
    after_build(ctx, header, save, export_aiperf)
    if execute:
        trace = json.loads(fetch_document(ctx, header["digest"]))
        execute_replay(ctx, trace, revision=revision, target_url=target_url, schedule=schedule,
                       acknowledge_cost=acknowledge_cost, max_requests=max_requests,
                       time_scale=time_scale, max_duration=max_duration,
                       max_error_rate=max_error_rate)
        return
    emit(ctx, header, render_header)
