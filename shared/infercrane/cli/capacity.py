"""`infercrane capacity`: this tenant's observed lifecycle attempts, grouped and normalized."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from infercrane.cli.output import emit, print_table

CLASSES = [("capacity", "capacity"), ("quota", "quota"), ("permission_config", "perm/config"),
           ("runtime", "runtime"), ("timeout", "timeout"), ("transient", "transient"),
           ("unknown", "unknown")]
DIMENSIONS = ["adapter", "runtime", "compute_mode", "region", "gpu"]


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None, insufficient: bool, n: int, method: str = "exact") -> str:
    if insufficient:
        return f"too few samples (n={n})"
    # `≈` marks a DDSketch estimate; an exact percentile has no mark.
    return "-" if value is None else f"{'' if method == 'exact' else '≈'}{value:,.1f}"


def _interval(ci: list[float] | None) -> str:
    return "-" if ci is None else f"{100 * ci[0]:.1f}-{100 * ci[1]:.1f}%"


EVIDENCE_MARK = {"strong": "", "moderate": "~", "weak": "?", "insufficient": "??"}


def render(console: Console, doc: dict[str, Any]) -> None:
    window = doc["window"]
    dims = [d for d in DIMENSIONS if d in doc["group_by"]]
    t = Table(title=f"capacity, {window['duration']} ({window['start']} .. {window['end']})",
              title_justify="left",
              caption="tenant-observed: only this tenant's own attempts; not global availability, "
                      "never other customers' data. ! = capacity failures dominate; "
                      "evidence ~ moderate, ? weak, ?? insufficient (strongest first).",
              caption_justify="left")
    numeric = ("samples", "ok", "failed", "cancel", "success", "95% CI")
    for d in ["", *dims, *numeric, "evidence"]:
        t.add_column(d.replace("compute_mode", "mode"), justify="right" if d in numeric
                     else "left")
    for _, label in CLASSES:
        t.add_column(label, justify="right")
    t.add_column("p50 s", justify="right")
    t.add_column("p95 s", justify="right")
    for g in doc["groups"]:
        dominant = bool(g["capacity_dominant"])
        n = g["duration_samples"]
        t.add_row("!" if dominant else "", *[str(g[d]) for d in dims], str(g["samples"]),
                  str(g["succeeded"]), str(g["failed"]), str(g["cancelled"]),
                  _rate(g["success_rate"]), _interval(g["success_rate_ci"]),
                  f"{EVIDENCE_MARK[g['evidence']]}{g['evidence']}",
                  *[str(g["failures"][c]) for c, _ in CLASSES],
                  _seconds(g["p50_duration_s"], g["p50_insufficient"], n, g["duration_method"]),
                  _seconds(g["p95_duration_s"], g["p95_insufficient"], n, g["duration_method"]),
                  style="bold red" if dominant else None)
    print_table(console, t, keys=1 + len(dims))
    if not doc["groups"]:
        console.print("no lifecycle attempts in this window")
    durations = doc["durations"]
    console.print(f"durations: succeeded and failed attempts; exact up to n={durations['exact_up_to_n']}, "
                  f"DDSketch beyond (≈, relative error <= {durations['relative_error']:.0%}); "
                  f"p95 shown from n>={durations['min_n_p95']}, p50 from n>={durations['min_n_p50']}. "
                  f"classifier {doc['classifier_version']}.")
    console.print(f"uncertainty: {doc['uncertainty']['evidence_rule']}.")


@click.group("capacity", invoke_without_command=True, epilog="""\b
Examples:
  infercrane capacity --window 720h
  infercrane capacity advise --gpu H100 --count 8
  infercrane capacity --window 7d --group-by adapter,gpu
  infercrane capacity --window 24h --until 2026-11-29T00:00:00Z --output json
\b
Groups are this tenant's own lifecycle attempts (tenant-observed), never global availability
and never other customers' data. Failures are normalized by a versioned classifier into
capacity, quota, permission_config, runtime, timeout, transient and unknown; quota is never
counted as capacity. success = succeeded / (succeeded + failed), with its 95 % Wilson score
interval; groups are sorted by evidence strength (strong, moderate, weak, insufficient: fewer
than 10 decided attempts), then by samples. p50/p95 below their minimum sample count read
"too few samples". Rows marked ! are groups whose capacity failures are at least half of
their failures. Windows are whole hours of started_at; the hour holding --until is included.
JSON adds success_rate_ci [lo, hi], insufficient, evidence, p50_insufficient, p95_insufficient.""")
@click.option("--window", default="720h", show_default=True, metavar="DURATION",
              help="How far back from --until: whole hours, e.g. 24h, 7d, 720h.")
@click.option("--until", default=None, metavar="ISO", help="End of the window (default now).")
@click.option("--group-by", default=None, metavar="DIMS",
              help="Comma-separated subset of adapter,runtime,compute_mode,region,gpu "
                   "(default all five); grouped-away dimensions are null.")
@click.pass_context
def command(ctx: click.Context, window: str, until: str | None, group_by: str | None) -> None:
    """Capacity report: samples, success rate, failures by class, p50/p95 operation duration.

    `capacity advise` ranks where to place a GPU type, from the same evidence."""
    if ctx.invoked_subcommand is not None:
        return
    doc = ctx.obj.api().request("GET", "/v1/capacity",
                                params={"window": window, "until": until, "group_by": group_by})
    emit(ctx, doc, render)


def render_advice(console: Console, doc: dict[str, Any]) -> None:
    q = doc["query"]
    window = doc["window"]
    t = Table(title=f"placement advice for {q['gpu']}"
                    + (f" x{q['count']}" if q["count"] else "")
                    + (f" on {q['adapter']}" if q["adapter"] else "")
                    + f", {window['duration']} ({window['start']} .. {window['end']})",
              title_justify="left", caption=doc["note"], caption_justify="left")
    for name in ("#", "region", "mode", "adapter", "runtime", "n", "95% CI", "p95 s", "flag",
                 "why"):
        t.add_column(name, justify="right" if name in ("#", "n", "95% CI", "p95 s") else "left")
    for o in doc["options"]:
        mark = "" if o.get("duration_method", "exact") == "exact" else "≈"
        p95 = "too few" if o["p95_duration_s"] is None else f"{mark}{o['p95_duration_s']:,.0f}"
        t.add_row(str(o["rank"]), o["region"], o["compute_mode"], o["adapter"], o["runtime"],
                  str(o["placement_n"]), _interval(o["success_interval"]), p95, o["flag"] or "",
                  f"{o['why']} ({o['basis']})",
                  style="yellow" if o["flag"] else ("dim" if o["insufficient"] else None))
    print_table(console, t, keys=5)
    if not doc["options"]:
        console.print(f"no lifecycle attempts of {q['gpu']} in this window: no evidence to rank")
    console.print(f"ranking: {doc['ranking']}. {doc['quota_rule']}. {doc['gpu_count_note']}")


@command.command("advise", epilog="""\b
Examples:
  infercrane capacity advise --gpu H100
  infercrane capacity advise --gpu H100 --count 8 --adapter aws --window 720h --output json
\b
Ranks region x compute mode x adapter x runtime for this tenant by the lower bound of the 95 %
Wilson interval of placement success (quota failures left out: they are your limit, not the
provider's capacity), then by p95 duration. Each option says why it is where it is: n, interval,
dominant failure class. Options whose recent failures are mostly quota are flagged "quota, not
capacity: raise the limit". Tenant-observed evidence only: not global availability.""")
@click.option("--gpu", required=True, metavar="TYPE", help="GPU type, e.g. H100.")
@click.option("--count", type=click.IntRange(1, 4096), default=None,
              help="GPUs per placement (stated in the output; rollups do not split by count).")
@click.option("--adapter", type=click.Choice(["aws", "gcp", "kubernetes"]), default=None,
              help="Only this provider adapter.")
@click.option("--window", default="720h", show_default=True, metavar="DURATION",
              help="Evidence window: whole hours, e.g. 24h, 7d, 720h.")
@click.option("--until", default=None, metavar="ISO", help="End of the window (default now).")
@click.pass_context
def advise(ctx: click.Context, gpu: str, count: int | None, adapter: str | None, window: str,
           until: str | None) -> None:
    """Rank where to place a GPU type, from this tenant's own lifecycle attempts."""
    doc = ctx.obj.api().request("GET", "/v1/capacity/advice", params={
        "gpu": gpu, "count": count, "adapter": adapter, "window": window, "until": until})
    emit(ctx, doc, render_advice)
