"""`infercrane capture ...`: import real traces into the capture path."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infercrane.adapters.trace_files import (
    FORMATS,
    RELATIVE_FORMATS,
    TIMESTAMP_UNITS,
    check_timestamps,
    scan,
    stream_rows,
)
from infercrane.cli.client import ApiClient, CliError
from infercrane.cli.output import emit, stderr, table
from infercrane.domain.importers import (
    DEFAULT_BLOCK_SIZE,
    ImportOptions,
    Placement,
    RowError,
    ServiceTimeModel,
    import_id,
    observation_item,
)
from infercrane.errors import InvalidInput

BATCH = 500
IN_FLIGHT = 4  # batches posted at once: the API answers them in parallel
MAX_REPORTED_ERRORS = 1000  # the summary lists this many; the count covers all


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


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


@contextmanager
def _reading(verb: str, name: str, total: int) -> Iterator[Callable[[int, int], None]]:
    """Progress on stderr as the file is read: bytes of the total and rows, every second at most
    (one line each on a terminal, redrawn in place)."""
    tty = sys.stderr.isatty()
    began = last = time.monotonic()
    state = {"bytes": 0, "rows": 0}

    def show(final: bool = False) -> None:
        elapsed = max(time.monotonic() - began, 1e-9)
        share = state["bytes"] / total * 100 if total else 100.0
        text = (f"{verb} {name}: {_size(state['bytes'])} of {_size(total)} ({share:.0f}%), "
                f"{state['rows']:,} rows, {state['rows'] / elapsed:,.0f} rows/s")
        if tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def update(read: int, rows: int) -> None:
        nonlocal last
        state["bytes"], state["rows"] = max(state["bytes"], read), rows
        now = time.monotonic()
        if now - last >= 1.0:
            last = now
            show()

    yield update
    show(final=True)


@command.command("import", epilog="""\b
Examples:
  infercrane capture import azure_llm_inference_2023_code.csv \\
      --deployment coder-production --format azure-csv
  infercrane capture import mooncake_trace.jsonl --deployment chat --format mooncake-jsonl \\
      --start 2026-11-29T00:00:00Z --output json
  infercrane capture import spans.jsonl --deployment chat --format otlp-json
\b
Formats (docs/capture.md has the details):
  azure-csv       TIMESTAMP,ContextTokens,GeneratedTokens; 2023 times
                  (2023-11-16 18:15:46.6805900) and 2024 times
                  (2024-05-10 00:00:00.009930+00:00), UTC
  mooncake-jsonl  Mooncake / AIPerf mooncake_trace: timestamp (ms) or delay,
                  input_length, output_length, hash_ids, session_id; needs --start.
                  text_input / messages / payload are never read: dropped, counted
  otlp-json       OTLP/JSON trace exports, one per line
  jsonl           native observation items, one per line
\b
Import ids: an import is identified by the file's SHA-256, its format and these
options. Importing the same file again with the same options stores nothing new
(the summary counts new vs already-present rows); the same file with another
--start or other options is refused, unless --replace deletes the first import.
\b
The file is read twice, as a stream (constant memory): once to digest and check
it, once to send it, with progress (bytes, rows) on stderr. Files without
latencies get it from a deterministic service-time model, recorded with its
parameters and marked timing_source "modeled":
  ttft    = overhead + prefill x input tokens
  latency = ttft + decode x output tokens
Exit codes: 0 all accepted, 2 some records rejected or bad input (409: already
imported differently), 1 service failure.""")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--deployment", required=True, metavar="NAME", help="Deployment to import into.")
@click.option("--format", "fmt", required=True, type=click.Choice(FORMATS),
              help="File format (see below).")
@click.option("--start", default=None, metavar="ISO",
              help="Move the file's first arrival to this time, keeping every offset "
                   "(required for mooncake-jsonl, whose timestamps are relative).")
@click.option("--revision", default=None, metavar="REV", help="Revision to record on each observation.")
@click.option("--block-size", type=click.IntRange(1, 1_000_000), default=DEFAULT_BLOCK_SIZE,
              show_default=True, help="Tokens per hash_ids block (mooncake-jsonl); recorded on "
                                      "each observation and in traces built from them.")
@click.option("--timestamp-unit", type=click.Choice(sorted(TIMESTAMP_UNITS)), default=None,
              help="Unit of mooncake timestamps and delays (the spec says ms). Needed when the "
                   "file's values make the unit ambiguous (epoch-like, or under 1 ms apart).")
@click.option("--replace", is_flag=True,
              help="Replace an earlier import of the same file made with other options.")
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
                revision: str | None, block_size: int, timestamp_unit: str | None,
                replace: bool, model_overhead_ms: float, model_prefill_ms_per_token: float,
                model_decode_ms_per_token: float) -> None:
    """Import a trace FILE: each record becomes one observation of DEPLOYMENT."""
    try:
        model = ServiceTimeModel(model_overhead_ms, model_prefill_ms_per_token,
                                 model_decode_ms_per_token)
        options = ImportOptions(fmt, deployment, _start(start), model, revision, block_size,
                                timestamp_unit)
        if fmt in RELATIVE_FORMATS and options.start is None:
            raise InvalidInput("This format has relative timestamps: pass a start time.",
                               field="start")
        with _reading("checking", file.name, file.stat().st_size) as update:
            facts = scan(file, options, on_read=update)
        check_timestamps(options, facts.stats)
        placement = Placement(options.start, facts.first_ns, fmt in RELATIVE_FORMATS)
    except InvalidInput as exc:
        raise CliError(f"{exc.message} (field: {exc.field})" if exc.field else exc.message,
                       2) from exc
    ref = import_id(facts.sha256, options)
    api = ctx.obj.api()
    registered = api.request("POST", "/v1/imports", {
        "deployment": deployment, "import_id": ref, "file_sha256": facts.sha256, "format": fmt,
        "options": options.recorded(), "records": facts.records, "replace": replace,
        "first_arrival": None if facts.first_ns is None else placement.arrival(facts.first_ns),
        "last_arrival": None if facts.last_ns is None else placement.arrival(facts.last_ns)})
    if registered["status"] == "replaced":
        stderr.print(f"replaced import {registered['replaced']} of this file "
                     f"({registered['deleted']:,} observations deleted)")
    for name, count in sorted(facts.stats.dropped_fields.items()):
        stderr.print(f"dropped `{name}` on {count:,} rows: content is never read or sent")
    for name, count in sorted(facts.stats.ignored_fields.items()):
        stderr.print(f"ignored unknown field `{name}` on {count:,} rows")
    sent = _send(api, file, options, placement, ref, f"{fmt}:sha256:{facts.sha256}",
                 facts.size)
    rejected = facts.records - sent["accepted"]
    document = {
        "import_id": ref, "status": registered["status"], "replaced": registered["replaced"],
        "deleted": registered["deleted"], "file_sha256": facts.sha256, "format": fmt,
        "records": facts.records, "accepted": sent["accepted"], "stored": sent["stored"],
        "already_present": sent["already_present"], "rejected": rejected,
        "header_lines": facts.stats.header_lines,
        "dropped_fields": dict(sorted(facts.stats.dropped_fields.items())),
        "errors": sent["errors"], "errors_listed": len(sent["errors"]),
    }

    def render(console: Console, d: dict[str, Any]) -> None:
        console.print(f"imported {file.name} into {deployment} ({d['import_id']}, {d['status']}): "
                      f"{d['accepted']:,} accepted ({d['stored']:,} new, "
                      f"{d['already_present']:,} already present), {d['rejected']:,} rejected")
        if d["errors"]:
            console.print(table("rejected records (first 20)", ["line", "field", "code", "message"],
                                [(e["line"], e["field"], e["code"], e["message"])
                                 for e in d["errors"][:20]]))

    emit(ctx, document, render)
    if rejected:
        raise CliError(f"{rejected} records were rejected.", 2)


def _send(api: ApiClient, file: Path, options: ImportOptions, placement: Placement, ref: str,
          provenance: str, size: int) -> dict[str, Any]:
    """Stream the file's rows to `POST /v1/observations`, IN_FLIGHT batches at a time (so memory
    holds a few batches, never the file); errors carry their record index and file line."""
    totals: dict[str, Any] = {"accepted": 0, "stored": 0, "already_present": 0, "errors": []}
    errors: list[dict[str, Any]] = totals["errors"]

    def note(error: dict[str, Any]) -> None:
        if len(errors) < MAX_REPORTED_ERRORS:
            errors.append(error)

    def collect(done: Future[Any], where: list[tuple[int, int]]) -> None:
        doc = done.result()
        totals["accepted"] += int(doc["accepted"])
        totals["stored"] += int(doc.get("stored", 0))
        totals["already_present"] += int(doc.get("already_present", 0))
        for err in doc.get("errors", []):
            index, line = where[int(err["index"])]
            note({**err, "index": index, "line": line})

    pending: list[tuple[Future[Any], list[tuple[int, int]]]] = []
    batch: list[dict[str, Any]] = []
    where: list[tuple[int, int]] = []
    index = 0
    with _reading("importing", file.name, size) as update, \
            ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        def flush() -> None:
            nonlocal batch, where
            pending.append((pool.submit(api.request, "POST", "/v1/observations",
                                        {"items": batch}), where))
            batch, where = [], []
            while len(pending) >= IN_FLIGHT:
                collect(*pending.pop(0))

        read = 0

        def on_read(n: int) -> None:
            nonlocal read
            read = n

        for row in stream_rows(file, options, on_read):
            if isinstance(row, RowError):
                note({"index": index, "line": row.line, "field": row.field, "code": row.code,
                      "message": row.message})
            else:
                batch.append(observation_item(row, options, ref, provenance, placement))
                where.append((index, row.line))
                if len(batch) == BATCH:
                    flush()
            index += 1
            update(read, index)
        if batch:
            flush()
        for done, at in pending:
            collect(done, at)
    errors.sort(key=lambda e: e["index"])
    return totals
