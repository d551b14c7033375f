"""`infercrane trace ...`: list, show and verify replay traces."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infercrane.cli.client import CliError
from infercrane.cli.output import emit, table
from infercrane.domain.digest import normalize_digest, verify_digest
from infercrane.errors import InvalidInput

VERIFY_EPILOG = """\b
Examples:
  infercrane replay coder-production --window 24h --save trace.json
  infercrane trace verify trace.json
  infercrane trace list coder-production --limit 20
  infercrane trace show sha256:3f2a...

`trace verify` works offline: it recomputes the digest (SHA-256 of the RFC 8785 canonical JSON,
without `digest` and `build`). Re-formatting the file keeps it valid; changing any value does not."""


def _digest_arg(value: str) -> str:
    try:
        return normalize_digest(value)
    except InvalidInput as exc:
        raise CliError(exc.message, 2) from exc


class _KeepRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the CLI follows it itself, without sending the API key to storage


def fetch_document(ctx: click.Context, digest: str) -> bytes:
    """The full trace document: inline when small, else from the presigned storage URL."""
    api = ctx.obj.api()
    api.request("GET", f"/v1/traces/{digest}")  # not found / unauthorized: the usual errors
    request = urllib.request.Request(  # noqa: S310
        api.endpoint.rstrip("/") + f"/v1/traces/{digest}/document",
        headers={"Accept": "application/json", "Authorization": f"Bearer {api.api_key}"})
    opener = urllib.request.build_opener(_KeepRedirect)
    try:
        with opener.open(request, timeout=api.timeout_s) as resp:
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as exc:
        location = exc.headers.get("Location")
        if exc.code not in (301, 302, 303, 307) or not location:
            raise CliError(f"Could not fetch the trace document (HTTP {exc.code}).", 1) from exc
    except urllib.error.URLError as exc:
        raise CliError(f"Cannot reach {api.endpoint}: {exc.reason}.", 1) from exc
    try:
        with urllib.request.urlopen(location, timeout=api.timeout_s) as resp:  # noqa: S310
            stored: bytes = resp.read()
            return stored
    except (urllib.error.URLError, OSError) as exc:
        raise CliError("Could not fetch the trace document from storage.", 1) from exc


def render_header(console: Console, header: dict[str, Any]) -> None:
    stats = header["statistics"]
    window = header["window"]
    console.print(f"trace {header['digest']}")
    console.print(f"deployment {header['deployment']}  window {window['start']} -> {window['end']}")
    truncated = " (truncated: the earliest were kept)" if header["truncated"] else ""
    console.print(f"requests {header['sample_count']:,} of max {header.get('max_requests', '?')}"
                  f"{truncated}  evidence {header['evidence_class']}  "
                  f"timing {header['timing_source']}")

    def fmt(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"

    rows = []
    for name in ("input_tokens", "output_tokens"):
        s = stats[name]
        rows.append((name, fmt(s["mean"]), fmt(s["p50"]), fmt(s["p95"]), fmt(s["max"])))
    for name in ("ttft_ms", "latency_ms"):
        s = stats[name]
        rows.append((name, "", fmt(s["p50"]), fmt(s["p95"]), ""))
    console.print(table(None, ["metric", "mean", "p50", "p95", "max"], rows))
    console.print(f"rate {fmt(stats['request_rate_per_s'])}/s  peak concurrency "
                  f"{stats['peak_concurrency']}  sessions {stats['sessions']}  prefix reuse "
                  f"{fmt(stats['prefix_reuse_ratio'])}  percentiles {stats['percentile_method']}")
    histogram = header.get("arrival_histogram")
    if histogram and histogram["counts"]:
        console.print(f"arrivals over the window ({histogram['bins']} bins): "
                      f"{sparkline(histogram['counts'])}  max/bin {max(histogram['counts'])}")


def sparkline(counts: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(counts) if counts else 0
    if top == 0:
        return bars[0] * len(counts)
    return "".join(bars[0] if c == 0 else bars[max(1, -(-c * 8 // top))] for c in counts)


@click.group("trace", epilog=VERIFY_EPILOG)
def command() -> None:
    """Inspect and check replay traces (what `infercrane replay` built)."""


@command.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def verify(ctx: click.Context, file: Path) -> None:
    """Recompute FILE's canonical digest offline and check it against the one it records."""
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError("The file is not a JSON document.", 2) from exc
    if not isinstance(document, dict) or not isinstance(document.get("digest"), str):
        raise CliError("The file is not a trace document (it has no digest).", 2)
    try:
        ok, recomputed = verify_digest(document)
    except InvalidInput as exc:
        raise CliError(exc.message, 2) from exc
    result = {"verified": ok, "digest": document["digest"], "recomputed": recomputed}
    if not ok:
        if ctx.obj.output == "json":
            click.echo(json.dumps(result))
        raise CliError("Digest mismatch: the document's content changed after it was built "
                       f"(it records {document['digest']}, its content gives {recomputed}).", 1)
    emit(ctx, result, lambda c, d: c.print(f"verified: content matches {d['digest']}"))


@command.command("show")
@click.argument("digest")
@click.pass_context
def show(ctx: click.Context, digest: str) -> None:
    """Show one trace's header (statistics, window, evidence class) by DIGEST."""
    doc = ctx.obj.api().request("GET", f"/v1/traces/{_digest_arg(digest)}")
    emit(ctx, doc, render_header)


@command.command("list")
@click.argument("deployment")
@click.option("--limit", default=100, type=click.IntRange(1, 1000), show_default=True)
@click.option("--next-token", default=None, help="Continue from a previous page.")
@click.pass_context
def list_traces(ctx: click.Context, deployment: str, limit: int, next_token: str | None) -> None:
    """List DEPLOYMENT's traces, newest first."""
    doc = ctx.obj.api().request("GET", "/v1/traces", params={
        "deployment": deployment, "limit": limit, "next_token": next_token})

    def render(console: Console, d: dict[str, Any]) -> None:
        console.print(table(f"traces of {deployment}", [
            "created", "digest", "window start", "window end", "requests", "evidence"], [
            (h["created_at"], h["digest"], h["window"]["start"], h["window"]["end"],
             h["sample_count"], h["evidence_class"]) for h in d["traces"]]))
        if d.get("next_token"):
            console.print(f"more: --next-token {d['next_token']}")

    emit(ctx, doc, render)


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

    rows = [(name, "KS D", num(f[name]["statistic"]), num(f[name]["p_value"], 3),
             f"n {f[name]['n_a']:,} / {f[name]['n_b']:,}", f[name]["verdict"])
            for name in ("input_tokens", "output_tokens", "inter_arrival_ms")]
    rate = f["request_rate"]
    rows.append(("request_rate", "B/A rate", num(rate["ratio"]), num(rate["p_value"], 3),
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


@command.command("compare", epilog="""\b
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
    emit(ctx, doc, render_comparison)
