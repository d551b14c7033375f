"""`infercrane trace ...`: list, show and verify replay traces."""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infercrane.cli.client import CliError
from infercrane.cli.output import banner, emit, table
from infercrane.cli.sidecar import save_signed_export, write_sidecar
from infercrane.cli.trace_compare import compare
from infercrane.cli.verify import (
    SIDECAR_SUFFIX,
    is_comparison,
    read_sidecar,
    verify_file,
    verify_trace,
)
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.digest import normalize_digest_prefix
from infercrane.errors import InvalidInput

VERIFY_EPILOG = """\b
Examples:
  infercrane replay coder-production --window 24h --save trace.json
  infercrane trace verify trace.json
  infercrane trace verify sha256:3f2a...
  infercrane trace list coder-production --limit 20
  infercrane trace show sha256:3f2a...

`trace verify` checks the service's signature (DSSE envelope of an in-toto statement, saved
beside the file as FILE.intoto.jsonl), the digest (SHA-256 of the RFC 8785 canonical JSON, without
`digest` and `build`), the blocks (every top-level field, `build` included, is the one signed; a
changed one is named), the JSON schema, the statistics and the evidence class.

\b
Fully offline:
  infercrane admin signing-key > signing-key.pem
  infercrane trace verify trace.json --public-key signing-key.pem

Re-formatting the file keeps it valid; changing any value does not, even with its digest
recomputed. Exit codes: 0 verified, 5 verification failed, 1 service failure."""


def _digest_arg(value: str) -> str:
    try:
        return normalize_digest_prefix(value)  # the service resolves a unique prefix
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
    selection = header.get("selection")
    truncated = "" if not header["truncated"] else (
        " (truncated: the earliest were kept)" if selection is None
        else f" (truncated: the {selection['method']} slice of "
             f"{selection['window_requests']:,} in the window)")
    console.print(f"requests {header['sample_count']:,} of max {header.get('max_requests', '?')}"
                  f"{truncated}  evidence {header['evidence_class']}  "
                  f"timing {header['timing_source']}")
    if selection is not None:
        console.print(selection_line(selection))

    def fmt(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"

    rows = []
    for name in ("input_tokens", "output_tokens"):
        s = stats[name]
        rows.append((name, fmt(s["mean"]), fmt(s["p50"]), fmt(s["p95"]), fmt(s["max"])))
    modeled = " (modeled)" if header["timing_source"] == "modeled" else ""
    for name in ("ttft_ms", "latency_ms"):
        s = stats[name]
        rows.append((name + modeled, "", fmt(s["p50"]), fmt(s["p95"]), ""))
    console.print(table(None, ["metric", "mean", "p50", "p95", "max"], rows))
    span = stats.get("arrival_span_ms")
    console.print(f"rate {fmt(stats['request_rate_per_s'])}/s over the arrival span "
                  f"{'-' if span is None else f'{span / 1000:,.1f} s'} (window "
                  f"{window['duration_ms'] / 1000:,.0f} s)  peak concurrency "
                  f"{stats['peak_concurrency']}  sessions {stats['sessions']}  block repeat "
                  f"{fmt(stats.get('block_repeat_ratio'))}  percentiles "
                  f"{stats['percentile_method']}")
    histogram = header.get("arrival_histogram")
    if histogram and histogram["counts"]:
        console.print(f"arrivals over the window ({histogram['bins']} bins): "
                      f"{sparkline(histogram['counts'])}  max/bin {max(histogram['counts'])}")


def selection_line(selection: dict[str, Any]) -> str:
    """One line: which slice the trace is, and how far its shape is from the whole window's."""
    span, ks = selection["span"], selection["ks"]
    coverage = selection.get("coverage")
    share = "-" if coverage is None else f"{coverage:.1%}"
    distances = "  ".join(f"{name} {'-' if d is None else f'{d:.3f}'}" for name, d in ks.items())
    return (f"slice {selection['method']} {span['start']} -> {span['end']} ({share} of the "
            f"window's traffic span; {selection['sessions_left_out']:,} sessions left out whole)"
            f"  KS D vs window: {distances}")


def sparkline(counts: list[int]) -> str:
    bars = " ▁▂▃▄▅▆▇█"
    top = max(counts) if counts else 0
    if top == 0:
        return bars[0] * len(counts)
    return "".join(bars[0] if c == 0 else bars[max(1, -(-c * 8 // top))] for c in counts)


@click.group("trace", epilog=VERIFY_EPILOG)
def command() -> None:
    """Inspect and check replay traces (what `infercrane replay` built)."""


VERIFY_FAILED = 5  # exit code: verification failed (1 stays "service failure")


def _load_public_key(ctx: click.Context, public_key: Path | None) -> str:
    if public_key is not None:
        return public_key.read_text(encoding="utf-8")
    doc = ctx.obj.api().request("GET", "/v1/signing-key")
    return str(doc["public_key_pem"])


def _read_attestation(path: Path) -> dict[str, Any]:
    try:
        return read_sidecar(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError(f"{path} holds no DSSE envelope.", 2) from exc


def _parse_trace(body: bytes) -> dict[str, Any] | None:
    """The trace document in `body`, or None when it is another file (an AIPerf export)."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return document if isinstance(document, dict) else None


def render_rows(console: Console, result: dict[str, Any]) -> None:
    console.print(table(f"verify {result['subject']}", ["check", "result", "detail"], [
        (r["check"], "ok" if r["ok"] else "FAILED", r["detail"]) for r in result["rows"]]))
    console.print("verified" if result["verified"] else
                  "NOT verified: " + ", ".join(r["check"] for r in result["rows"] if not r["ok"]))


@command.command("verify")
@click.argument("target")
@click.option("--public-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="PEM",
              help="The service's public key (`infercrane admin signing-key`): verify fully "
                   "offline. Default: fetch it from the service.")
@click.option("--attestation", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="FILE",
              help=f"The DSSE envelope (default: TARGET{SIDECAR_SUFFIX} beside a file, or the "
                   "service's copy when verifying by digest).")
@click.pass_context
def verify(ctx: click.Context, target: str, public_key: Path | None,
           attestation: Path | None) -> None:
    """Verify a trace FILE (or a stored trace by DIGEST), or an exported AIPerf file.

    One row per check: signature (the service's key signed a statement naming this content),
    digest, blocks (each top-level field, build included, as signed; names those changed), JSON
    schema, statistics recomputed from the records, evidence class against the records'
    sources. Exit 0 verified, 5 verification failed, 1 service failure.
    """
    path = Path(target)
    envelope = _read_attestation(attestation) if attestation is not None else None
    if path.is_file():
        body = path.read_bytes()
        sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
        if envelope is None and sidecar.is_file():
            envelope = _read_attestation(sidecar)
        document = _parse_trace(body)
        if document is not None and envelope is None and public_key is None \
                and isinstance(document.get("digest"), str):
            kind = "trace-comparisons" if is_comparison(document) else "traces"
            envelope = ctx.obj.api().request(
                "GET", f"/v1/{kind}/{_digest_arg(document['digest'])}/attestation")
    else:
        if not target.lower().removeprefix("sha256:").isalnum():
            raise CliError(f"{target} is neither a file nor a trace digest.", 2)
        digest = _digest_arg(target)
        body = fetch_document(ctx, digest)
        document = _parse_trace(body)
        if envelope is None:
            envelope = ctx.obj.api().request("GET", f"/v1/traces/{digest}/attestation")
    pem = _load_public_key(ctx, public_key)
    if document is not None:
        rows = verify_trace(document, envelope, pem)
        subject = str(document.get("digest", target))
    else:
        rows = verify_file(body, envelope, pem)
        subject = target
    result = {"verified": all(r.ok for r in rows), "subject": subject,
              "rows": [r.to_document() for r in rows]}
    emit(ctx, result, render_rows)
    if not result["verified"]:
        failed = ", ".join(r.check for r in rows if not r.ok)
        raise CliError(f"Verification failed: {failed}.", VERIFY_FAILED)


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
        listing = table(f"traces of {deployment}", [
            "created", "digest", "window start", "window end", "requests", "evidence"], [
            (h["created_at"], h["digest"], h["window"]["start"], h["window"]["end"],
             h["sample_count"], h["evidence_class"]) for h in d["traces"]])
        # A digest is what `trace show` takes: wrapped when narrow, never cut with an ellipsis.
        listing.columns[1].overflow = "fold"
        listing.columns[1].min_width = len("sha256:") + 64
        console.print(listing)
        if d.get("next_token"):
            console.print(f"more: --next-token {d['next_token']}")

    emit(ctx, doc, render)


GET_EPILOG = """\b
Examples:
  infercrane trace get 3f2a9c --save trace.json     # a unique digest prefix is enough
  infercrane trace get sha256:3f2a...  > trace.json
  infercrane trace export 3f2a9c --format mooncake --save trace.jsonl
\b
A digest prefix needs at least 6 hex digits; one that matches several traces is refused
(exit 2) with the advice to give more digits."""


def _save(body: bytes, save: Path | None) -> None:
    if save is None:
        click.echo(body.decode("utf-8"), nl=False)
    else:
        save.write_bytes(body)


@command.command("get", epilog=GET_EPILOG)
@click.argument("digest")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the document to FILE (default: stdout), and its signed attestation "
                   f"beside it (FILE{SIDECAR_SUFFIX}).")
@click.pass_context
def get(ctx: click.Context, digest: str, save: Path | None) -> None:
    """Download a stored trace's full document (records included) by DIGEST or a prefix."""
    api = ctx.obj.api()
    header = api.request("GET", f"/v1/traces/{_digest_arg(digest)}")
    body = fetch_document(ctx, header["digest"])
    _save(body, save)
    if save is not None:
        write_sidecar(save, api.request("GET", f"/v1/traces/{header['digest']}/attestation"))
        emit(ctx, {"digest": header["digest"], "saved": str(save), "size_bytes": len(body),
                   "sample_count": header["sample_count"]},
             lambda c, d: c.print(f"saved trace {d['digest']} ({d['sample_count']:,} requests, "
                                  f"{d['size_bytes']:,} bytes) to {d['saved']}"))


def aiperf_command(input_file: Path | str, block_sizes: set[int], model: str | None,
                   url: str | None) -> str:
    """The `aiperf profile` line that replays a mooncake_trace export on its own schedule."""
    parts = ["aiperf", "profile", "--model", model or "<model>", "--url", url or "<url>",
             "--endpoint-type", "chat", "--streaming", "--input-file", str(input_file),
             "--custom-dataset-type", "mooncake_trace", "--fixed-schedule"]
    if len(block_sizes) == 1 and next(iter(block_sizes)) != 512:
        parts += ["--isl-block-size", str(next(iter(block_sizes)))]
    return " ".join(p if p.startswith("<") else shlex.quote(p) for p in parts)


def announce_aiperf(document: dict[str, Any], input_file: Path | str, model: str | None = None,
                    url: str | None = None) -> None:
    sizes = {int(r["prefix_block_size"]) for r in document["records"]
             if r.get("prefix_block_size")}
    if len(sizes) > 1:
        banner(f"note: the trace mixes block sizes {sorted(sizes)}; AIPerf takes one "
               "(--isl-block-size)")
    banner("replay it with AIPerf (an approximation of the traffic, see docs/execution.md):")
    # Plain text, never wrapped or styled: it is meant to be copied as one line.
    click.echo("  " + aiperf_command(input_file, sizes, model, url), err=True)


@command.command("export", epilog=GET_EPILOG)
@click.argument("digest")
@click.option("--format", "fmt", type=click.Choice(["mooncake"]), default="mooncake",
              show_default=True, help="mooncake: AIPerf's mooncake_trace JSONL.")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the export to FILE (default: stdout), and the service's signed "
                   f"attestation of it beside it (FILE{SIDECAR_SUFFIX}).")
@click.option("--model", default=None, help="Model name to put in the printed aiperf line.")
@click.option("--url", default=None, help="Endpoint URL to put in the printed aiperf line.")
@click.pass_context
def export(ctx: click.Context, digest: str, fmt: str, save: Path | None, model: str | None,
           url: str | None) -> None:
    """Export a stored trace (by DIGEST or a prefix) for a load generator, and print the
    ready-to-run `aiperf profile` line on stderr."""
    header = ctx.obj.api().request("GET", f"/v1/traces/{_digest_arg(digest)}")
    document = json.loads(fetch_document(ctx, header["digest"]))
    rows = mooncake_jsonl(document).encode("utf-8")
    if save is None:
        _save(rows, None)
    else:
        save_signed_export(ctx.obj.api(), header["digest"], save, rows)
        banner(f"wrote {header['sample_count']:,} mooncake_trace rows of {header['digest']} "
               f"to {save} (signed attestation: {save}{SIDECAR_SUFFIX})")
    announce_aiperf(document, save or "FILE", model, url)


command.add_command(compare)
