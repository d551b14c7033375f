"""`infercrane report`: one self-contained HTML file of a deployment's traffic shape and capacity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from infercrane.cli.client import CliError
from infercrane.cli.output import emit
from infercrane.cli.trace import fetch_document
from infercrane.clock import utcnow
from infercrane.domain.report import build_report


@click.command("report", epilog="""\b
Examples:
  infercrane report --deployment coder-production --window 24h --out report.html
  infercrane report --deployment coder-production --window 3h --model-digest sha256:... \\
      --execution ex-20261130-1 --out report.html
\b
Builds (or finds) the deployment's trace for the window, reads this tenant's capacity report
(region x GPU) and, when given, cache state and an execution's evidence, and writes ONE HTML
file: arrival rate, input/output tokens, prefix reuse, the capacity heatmap (colour = lower
bound of the 95 % success interval, with n), cache state per location and the execution's
fidelity (AIPerf measured / captured). plotly.js is inlined and the page may not fetch
anything, so it opens offline. Every chart names its dates, evidence class and source digest;
the capacity panel shows the --capacity-window up to now, not the traffic's window.""")
@click.option("--deployment", required=True, help="Deployment whose traffic to show.")
@click.option("--window", default="24h", show_default=True, metavar="DURATION",
              help="Traffic window, e.g. 30m, 24h, 7d.")
@click.option("--until", default=None, metavar="ISO", help="End of the window (default now).")
@click.option("--max-requests", default=20000, show_default=True,
              type=click.IntRange(1, 100_000), help="At most this many requests in the trace.")
@click.option("--capacity-window", default="720h", show_default=True, metavar="DURATION",
              help="Capacity evidence window (whole hours), up to now whatever --until says.")
@click.option("--model-digest", "models", multiple=True, metavar="DIGEST",
              help="Show this model's cache state per location (repeatable).")
@click.option("--execution", default=None, metavar="ID",
              help="Show this execution's fidelity (default: the deployment's latest recorded "
                   "execution, if any).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The HTML file to write.")
@click.pass_context
def command(ctx: click.Context, deployment: str, window: str, until: str | None,
            max_requests: int, capacity_window: str, models: tuple[str, ...],
            execution: str | None, out: Path) -> None:
    """Write an HTML report of DEPLOYMENT's traffic, capacity, cache and execution evidence."""
    # plotly is imported only here: every other command starts without it.
    from infercrane.adapters.plotly_report import render_html

    api = ctx.obj.api()
    body = {"deployment": deployment, "window": window, "max_requests": max_requests}
    if until is not None:
        body["until"] = until
    from infercrane.cli.replay import BUILD_TIMEOUT_HINT, wait_for_build

    header = api.request("POST", "/v1/traces", body=body, on_timeout=BUILD_TIMEOUT_HINT)
    if "build_id" in header:  # a large window is built asynchronously
        header = wait_for_build(api, header)
    trace = json.loads(fetch_document(ctx, header["digest"]))
    # Capacity is the tenant's evidence up to now, whatever the traffic's dates: a report on an
    # old trace still shows where the tenant can place today (the panel names its own dates).
    capacity = api.request("GET", "/v1/capacity", params={
        "window": capacity_window, "group_by": "region,gpu"})
    caches = {m: api.request("GET", f"/v1/cache/{m}") for m in models}
    evidence = (api.request("GET", f"/v1/executions/{execution}") if execution
                else _latest_execution(api, deployment))
    report = build_report(deployment=deployment, trace=trace, capacity=capacity, caches=caches,
                          execution=evidence, generated_at=utcnow())
    try:
        out.write_text(render_html(report), encoding="utf-8")
    except OSError as exc:
        raise CliError(f"Cannot write {out}: {exc.strerror}.", 1) from exc
    summary = {"out": str(out.resolve()), "trace_digest": report["trace_digest"],
               "figures": [{"id": f["id"], "evidence_class": f["evidence_class"],
                            "source_digest": f["source_digest"], "drawn": not f.get("empty")}
                           for f in report["figures"]],
               "notes": report["notes"]}
    emit(ctx, summary, lambda c, d: c.print(d["out"]))


def _latest_execution(api: Any, deployment: str) -> dict[str, Any] | None:
    """The deployment's most recently recorded execution, or None when it has none."""
    try:
        latest: dict[str, Any] = api.request(
            "GET", f"/v1/deployments/{deployment}/executions/latest")
    except CliError as exc:
        if exc.exit_code == 4:  # 404: no execution recorded for this deployment
            return None
        raise
    return latest
