"""`infercrane trace compare A B`: the drift of trace B against trace A, as a signed document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infercrane.cli.output import emit, table
from infercrane.cli.sidecar import write_sidecar


def render_comparison(console: Console, doc: dict[str, Any]) -> None:
    a, b = doc["a"], doc["b"]
    console.print(f"comparison {doc['digest']}")
    console.print(f"A {a['digest']}  {a['deployment']}  {a['sample_count']:,} requests  "
                  f"{a['window']['start']} -> {a['window']['end']}")
    console.print(f"B {b['digest']}  {b['deployment']}  {b['sample_count']:,} requests  "
                  f"{b['window']['start']} -> {b['window']['end']}")
    f = doc["figures"]

    def num(value: Any, digits: int = 4) -> str:
        if value is None:
            return "-"
        return f"{value:.{digits}g}" if isinstance(value, float) else str(value)

    def p_value(value: Any) -> str:
        # A p-value below the smallest double arrives as 0.0: it is tiny, not zero.
        return "< 1e-300" if isinstance(value, float) and value < 1e-300 else num(value, 3)

    rows = [(name, "KS D", num(f[name]["statistic"]), p_value(f[name]["p_value"]),
             f"n {f[name]['n_a']:,} / {f[name]['n_b']:,}", f[name]["verdict"])
            for name in ("input_tokens", "output_tokens", "inter_arrival_ms")]
    rate = f["request_rate"]
    rows.append(("request_rate", "B/A rate", num(rate["ratio"]), p_value(rate["p_value"]),
                 f"{num(rate['a_per_s'])}/s vs {num(rate['b_per_s'])}/s", rate["verdict"]))
    peak = f["peak_concurrency"]
    rows.append(("peak_concurrency", "B/A", num(peak["ratio"]), "",
                 f"{peak['a']} vs {peak['b']} (tolerance ±{peak.get('tolerance', 0):.0%})",
                 peak["verdict"]))
    reuse = f["prefix_reuse"]
    rows.append(("prefix_reuse", "B-A", num(reuse["difference"]), "",
                 f"{num(reuse['a'])} vs {num(reuse['b'])}", reuse["verdict"]))
    console.print(table(None, ["figure", "measure", "value", "p", "detail", "verdict"], rows))
    console.print(f"verdict: {doc['verdict']} (significance {doc['significance']}). "
                  f"{doc['methods']['distributions']}.")


@click.command("compare", epilog="""\b
Examples:
  infercrane trace compare sha256:3f2a... sha256:9c1d...
  infercrane trace compare 3f2a9c 9c1d07 --significance 0.05 --save drift.json
  infercrane trace verify drift.json
\b
A and B are digests or unique prefixes (at least 6 hex digits) of this tenant's traces. For
input tokens, output tokens and inter-arrival times: the two-sample Kolmogorov-Smirnov statistic
and p-value; the request rate ratio B/A over each trace's first-to-last arrival span with an
exact test of equal Poisson rates; peak concurrency and prefix reuse against a stated tolerance.
Each figure says "same shape" or "shifted" (p below --significance). The comparison is a
document with both source digests and its own digest: stored by the service, verifiable
offline with `trace verify`.""")
@click.argument("a")
@click.argument("b")
@click.option("--significance", type=click.FloatRange(0, 0.5, min_open=True, max_open=True),
              default=0.01, show_default=True, help="p below this reads \"shifted\".")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the comparison document to this file.")
@click.pass_context
def compare(ctx: click.Context, a: str, b: str, significance: float, save: Path | None) -> None:
    """Compare the shape of trace B with trace A (drift), as a digest-addressed document."""
    doc = ctx.obj.api().request("POST", "/v1/trace-comparisons",
                                body={"a": a, "b": b, "significance": significance})
    if save is not None:
        save.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        write_sidecar(save, ctx.obj.api().request(
            "GET", f"/v1/trace-comparisons/{doc['digest']}/attestation"))
    emit(ctx, doc, render_comparison)
