"""`infercrane capture ...`: import real traces into the capture path."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infercrane.cli.client import CliError
from infercrane.cli.output import emit, progress, table
from infercrane.domain.importers import FORMATS, ServiceTimeModel, read
from infercrane.errors import InvalidInput

BATCH = 500


@click.group("capture")
def command() -> None:
    """Capture the shape of inference traffic (never its content)."""


def _start(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        start = datetime.fromisoformat(value)
    except ValueError as exc:
        raise CliError("--start must be an ISO 8601 / RFC 3339 time, e.g. 2026-11-29T00:00:00Z.",
                       2) from exc
    if start.tzinfo is None:
        raise CliError("--start needs a timezone (use Z for UTC).", 2)
    return start


@command.command("import", epilog="""\b
Examples:
  infercrane capture import azure_llm_inference_2023_code.csv \\
      --deployment coder-production --format azure-csv
  infercrane capture import mooncake_trace.jsonl --deployment chat --format mooncake-jsonl \\
      --start 2026-11-29T00:00:00Z --output json
  infercrane capture import spans.json --deployment chat --format otlp-json
\b
Observation ids come from the file's SHA-256, the line number and --start, so importing the
same file again (same --start) stores nothing new. Files without latencies (azure-csv,
mooncake-jsonl) get it from a deterministic service-time model, recorded with its parameters
and marked timing_source "modeled":
  ttft    = overhead + prefill x input tokens
  latency = ttft + decode x output tokens
Exit codes: 0 all accepted, 2 some records rejected or bad input, 1 service failure.""")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--deployment", required=True, metavar="NAME", help="Deployment to import into.")
@click.option("--format", "fmt", required=True, type=click.Choice(FORMATS),
              help="File format (see below).")
@click.option("--start", default=None, metavar="ISO",
              help="Move the file's first arrival to this time, keeping every offset "
                   "(required for mooncake-jsonl, whose timestamps are relative).")
@click.option("--revision", default=None, metavar="REV", help="Revision to record on each observation.")
@click.option("--model-overhead-ms", type=float, default=ServiceTimeModel.overhead_ms,
              show_default=True, help="Service-time model: fixed overhead per request.")
@click.option("--model-prefill-ms-per-token", type=float,
              default=ServiceTimeModel.prefill_ms_per_token, show_default=True,
              help="Service-time model: prefill time per input token.")
@click.option("--model-decode-ms-per-token", type=float,
              default=ServiceTimeModel.decode_ms_per_token, show_default=True,
              help="Service-time model: decode time per output token.")
@click.pass_context
def import_file(ctx: click.Context, file: Path, deployment: str, fmt: str, start: str | None,
                revision: str | None, model_overhead_ms: float,
                model_prefill_ms_per_token: float, model_decode_ms_per_token: float) -> None:
    """Import a trace FILE: each record becomes one observation of DEPLOYMENT."""
    try:
        model = ServiceTimeModel(model_overhead_ms, model_prefill_ms_per_token,
                                 model_decode_ms_per_token)
        plan = read(file.read_bytes(), fmt, deployment, start=_start(start), model=model,
                    revision=revision)
    except InvalidInput as exc:
        raise CliError(f"{exc.message} (field: {exc.field})" if exc.field else exc.message,
                       2) from exc
    api = ctx.obj.api()
    accepted = 0
    errors: list[dict[str, Any]] = list(plan.errors)
    with progress(f"importing {file.name}", len(plan.items)) as advance:
        for offset in range(0, len(plan.items), BATCH):
            batch = plan.items[offset:offset + BATCH]
            doc = api.request("POST", "/v1/observations", {"items": batch})
            accepted += int(doc["accepted"])
            for err in doc.get("errors", []):
                at = offset + int(err["index"])
                errors.append({**err, "index": plan.index[at], "line": plan.lines[at]})
            advance(len(batch))
    errors.sort(key=lambda e: e["index"])
    rejected = plan.records - accepted
    document = {"accepted": accepted, "rejected": rejected, "errors": errors}

    def render(console: Console, d: dict[str, Any]) -> None:
        console.print(f"imported {file.name} into {deployment}: {d['accepted']} accepted, "
                      f"{d['rejected']} rejected")
        if d["errors"]:
            console.print(table("rejected records (first 20)", ["line", "field", "code", "message"],
                                [(e["line"], e["field"], e["code"], e["message"])
                                 for e in d["errors"][:20]]))

    emit(ctx, document, render)
    if rejected:
        raise CliError(f"{rejected} records were rejected.", 2)
