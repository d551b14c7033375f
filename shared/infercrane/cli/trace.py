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
from infercrane.cli.verify import SIDECAR_SUFFIX, read_sidecar, verify_file, verify_trace
from infercrane.domain.digest import normalize_digest
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
`digest` and `build`), the JSON schema, the statistics and the evidence class. Fully offline:
  infercrane admin signing-key > signing-key.pem
  infercrane trace verify trace.json --public-key signing-key.pem
Re-formatting the file keeps it valid; changing any value does not, even with its digest
recomputed. Exit codes: 0 verified, 5 verification failed, 1 service failure."""


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
    digest, JSON schema, statistics recomputed from the records, evidence class against the
    records' sources. Exit 0 verified, 5 verification failed, 1 service failure.
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
            envelope = ctx.obj.api().request(
                "GET", f"/v1/traces/{_digest_arg(document['digest'])}/attestation")
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
        console.print(table(f"traces of {deployment}", [
            "created", "digest", "window start", "window end", "requests", "evidence"], [
            (h["created_at"], h["digest"], h["window"]["start"], h["window"]["end"],
             h["sample_count"], h["evidence_class"]) for h in d["traces"]]))
        if d.get("next_token"):
            console.print(f"more: --next-token {d['next_token']}")

    emit(ctx, doc, render)
