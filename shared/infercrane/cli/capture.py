"""`infercrane capture ...`: import real traces into the capture path."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click
from rich.console import Console

from infercrane.adapters.trace_files import (
    FORMATS,
    RELATIVE_FORMATS,
    TIMESTAMP_UNITS,
    FileScan,
    scan,
    stream_rows,
)
from infercrane.adapters.trace_input import TraceInput
from infercrane.cli.client import ApiClient, CliError
from infercrane.cli.output import emit, stderr, table
from infercrane.domain.batch import MAX_BATCH
from infercrane.domain.importers import (
    DEFAULT_BLOCK_SIZE,
    SESSION_HISTORIES,
    ImportOptions,
    Placement,
    RowError,
    RowIdentity,
    ServiceTimeModel,
    import_id,
    observation_id,
    observation_item,
)
from infercrane.domain.imports import id_prefix, options_digest
from infercrane.errors import InvalidInput

# A batch's body stays under this many bytes (the API takes 10 MB, Lambda's event 6 MB): rows
# carrying thousands of prefix blocks (a long session) are sent across more requests.
BATCH_BYTES = 4_000_000
ROW_BYTES = 400  # a row without prefix blocks, as JSON, at most (measured: ~350)
# Batches in flight at most by default (the next batch is read while one fewer are). Each one
# in flight holds an execution environment of the API function: at the default tenant work rate
# (~2,000 imported rows/s, docs/capture.md "Limits") two batches of 500 keep the API busy over a
# link of up to ~0.5 s a round trip, and more only start more environments (on a 2-core local
# stack, 4 imported no faster than 2 and spent ~10 % more CPU per row: docs/bench.md, "Issue 27,
# closing round"). `--in-flight` raises it for a tenant whose work rate was raised.
IN_FLIGHT = 2
MAX_IN_FLIGHT = 16
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
def _reading(verb: str, name: str, total: int | None) -> Iterator[Callable[[int, int], None]]:
    """Progress on stderr as the file is read: bytes (of the total, when known: not on stdin)
    and rows, every second at most (one line each on a terminal, redrawn in place)."""
    tty = sys.stderr.isatty()
    began = last = time.monotonic()
    state = {"bytes": 0, "rows": 0}

    def show(final: bool = False) -> None:
        elapsed = max(time.monotonic() - began, 1e-9)
        if total is None:
            read = f"{_size(state['bytes'])} read"
        else:
            share = state["bytes"] / total * 100 if total else 100.0
            read = f"{_size(state['bytes'])} of {_size(total)} ({share:.0f}%)"
        text = (f"{verb} {name}: {read}, {state['rows']:,} rows, "
                f"{state['rows'] / elapsed:,.0f} rows/s")
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
  zcat trace.csv.gz | infercrane capture import - --deployment coder --format azure-csv
  infercrane capture import mooncake_trace.jsonl.zst --deployment chat \\
      --format mooncake-jsonl --start 2026-11-29T00:00:00Z --output json
  infercrane capture import spans.jsonl --deployment chat --format otlp-json
\b
FILE is a path, or - for stdin. gzip, bzip2, xz and zstd files are read as
such whatever their name (by their first bytes).
\b
Formats (docs/capture.md has the details); the first lines are checked, so a
file of another format is refused at once, naming the format it looks like:
  azure-csv       TIMESTAMP,ContextTokens,GeneratedTokens; 2023 times
                  (2023-11-16 18:15:46.6805900) and 2024 times
                  (2024-05-10 00:00:00.009930+00:00), UTC
  mooncake-jsonl  Mooncake / AIPerf mooncake_trace: timestamp (ms) or delay,
                  input_length, output_length, hash_ids, session_id; needs --start.
                  text_input / messages / payload are never read: dropped, counted
  otlp-json       OTLP/JSON trace exports, one per line
  jsonl           native observation items, one per line
\b
Sessions (mooncake-jsonl): a continuing turn holds either its new tokens only
(incremental, AIPerf's form) or the whole conversation so far (cumulative).
Without --session-history the file's follow-up turns decide (repeating the
previous turn's hash_ids blocks: cumulative); the choice and why go to stderr,
and mixed evidence is refused.
\b
Rows are identified by what they are (their values and their ordinal among
identical rows), not by the file's bytes: the same rows imported again with the
same options, from any file, encoding or compression, store nothing new (the
summary counts new vs already-present rows); the same rows with another --start
or other options are refused, unless --replace deletes the first import.
\b
The input is read twice as a stream (constant memory): once to check it, once
to send it (stdin is kept in a temporary file between the two), with progress
(bytes, rows) on stderr. Files without latencies get it from a deterministic
service-time model, recorded with its parameters, timing_source "modeled":
  ttft    = overhead + prefill x input tokens
  latency = ttft + decode x output tokens
Exit codes: 0 all accepted, 2 some records rejected or bad input (409: already
imported differently), 1 service failure.""")
@click.argument("file", metavar="FILE")
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
@click.option("--session-history", type=click.Choice(SESSION_HISTORIES), default=None,
              help="What a continuing mooncake session turn holds: its new tokens only "
                   "(incremental) or the whole history (cumulative). Default: decided from "
                   "the file, said on stderr; mixed files need it.")
@click.option("--replace", is_flag=True,
              help="Replace an earlier import of the same rows made with other options.")
@click.option("--in-flight", type=click.IntRange(1, MAX_IN_FLIGHT), default=IN_FLIGHT,
              show_default=True, metavar="N",
              help="Batches of up to 500 rows in flight at most (the next batch is read "
                   "while N-1 are). Each holds one API execution environment; raise it over a "
                   "slow link when the tenant's work rate (TenantWorkRate) was raised too.")
@click.option("--model-overhead-ms", type=float, default=ServiceTimeModel.overhead_ms,
              show_default=True, help="Service-time model: fixed overhead per request.")
@click.option("--model-prefill-ms-per-token", type=float,
              default=ServiceTimeModel.prefill_ms_per_token, show_default=True,
              help="Service-time model: prefill time per input token.")
@click.option("--model-decode-ms-per-token", type=float,
              default=ServiceTimeModel.decode_ms_per_token, show_default=True,
              help="Service-time model: decode time per output token.")
@click.pass_context
def import_file(ctx: click.Context, file: str, deployment: str, fmt: str, start: str | None,
                revision: str | None, block_size: int, timestamp_unit: str | None,
                session_history: str | None, replace: bool, in_flight: int,
                model_overhead_ms: float, model_prefill_ms_per_token: float,
                model_decode_ms_per_token: float) -> None:
    """Import a trace FILE (or - for stdin): each record becomes one observation of DEPLOYMENT."""
    if file == "-" and sys.stdin.isatty():
        raise CliError("FILE is - but stdin is a terminal: pipe the trace in, or name the file.",
                       2)
    try:
        source = TraceInput(file)
    except InvalidInput as exc:
        raise CliError(exc.message, 2) from exc
    try:
        _import(ctx, source, deployment, fmt, start, revision, block_size, timestamp_unit,
                session_history, replace,
                ServiceTimeModel(model_overhead_ms, model_prefill_ms_per_token,
                                 model_decode_ms_per_token), in_flight)
    except InvalidInput as exc:
        raise CliError(f"{exc.message} (field: {exc.field})" if exc.field else exc.message,
                       2) from exc
    finally:
        source.close()


def _import(ctx: click.Context, source: TraceInput, deployment: str, fmt: str,
            start: str | None, revision: str | None, block_size: int,
            timestamp_unit: str | None, session_history: str | None, replace: bool,
            model: ServiceTimeModel, in_flight: int) -> None:
    options = ImportOptions(fmt, deployment, _start(start), model, revision, block_size,
                            timestamp_unit, session_history)
    if fmt in RELATIVE_FORMATS and options.start is None:
        raise InvalidInput("This format has relative timestamps: pass a start time.",
                           field="start")
    with _reading("checking", source.label, source.size) as update:
        facts = scan(source, options, on_read=update)
    options = facts.options
    placement = Placement(options.start, facts.first_ns, fmt in RELATIVE_FORMATS)
    if facts.history_reason:
        stderr.print(f"sessions: {facts.history_reason}")
    ref = import_id(facts.rows_sha256, options)
    recorded = options.recorded()
    api = ctx.obj.api()
    registered = api.request("POST", "/v1/imports", {
        "deployment": deployment, "import_id": ref, "file_sha256": facts.rows_sha256,
        "format": fmt, "options": recorded, "records": facts.records, "replace": replace,
        "first_arrival": None if facts.first_ns is None else placement.arrival(facts.first_ns),
        "last_arrival": None if facts.last_ns is None else placement.arrival(facts.last_ns)})
    if registered["status"] == "replaced":
        stderr.print(f"replaced import {registered['replaced']} of these rows "
                     f"({registered['deleted']:,} observations deleted)")
    elif registered["status"] == "same":
        stderr.print(f"these rows were imported into {deployment} before ({ref}, "
                     f"{registered.get('registered_at', '?')}): rows already present are "
                     "counted, never stored twice")
    for name, count in sorted(facts.stats.dropped_fields.items()):
        stderr.print(f"dropped `{name}` on {count:,} rows: content is never read or sent")
    for name, count in sorted(facts.stats.ignored_fields.items()):
        stderr.print(f"ignored unknown field `{name}` on {count:,} rows")
    sent = _send(api, source, options, placement, id_prefix(fmt, recorded, facts.rows_sha256),
                 f"{fmt}:sha256:{options_digest(fmt, recorded)}", facts, in_flight)
    rejected = facts.records - sent["accepted"]
    document = {
        "import_id": ref, "status": registered["status"], "replaced": registered["replaced"],
        "deleted": registered["deleted"], "rows_sha256": facts.rows_sha256, "format": fmt,
        "compression": facts.compression, "session_history": options.session_history,
        "records": facts.records, "accepted": sent["accepted"], "stored": sent["stored"],
        "already_present": sent["already_present"], "rejected": rejected,
        "header_lines": facts.stats.header_lines,
        "dropped_fields": dict(sorted(facts.stats.dropped_fields.items())),
        "errors": sent["errors"], "errors_listed": len(sent["errors"]),
    }

    def render(console: Console, d: dict[str, Any]) -> None:
        console.print(f"imported {source.label} into {deployment} ({d['import_id']}, "
                      f"{d['status']}): {d['accepted']:,} accepted ({d['stored']:,} new, "
                      f"{d['already_present']:,} already present), {d['rejected']:,} rejected")
        if d["errors"]:
            console.print(table("rejected records (first 20)", ["line", "field", "code", "message"],
                                [(e["line"], e["field"], e["code"], e["message"])
                                 for e in d["errors"][:20]]))

    emit(ctx, document, render)
    if rejected:
        raise CliError(f"{rejected} records were rejected.", 2)


def _row_bytes(item: dict[str, Any]) -> int:
    # Only rows with prefix blocks can be large; measuring them is one C-encoder call.
    return len(json.dumps(item)) if "prefix_block_ids" in item else ROW_BYTES


def _send(api: ApiClient, source: TraceInput, options: ImportOptions, placement: Placement,
          prefix: str, provenance: str, facts: FileScan,
          in_flight: int = IN_FLIGHT) -> dict[str, Any]:
    """Stream the input's rows to `POST /v1/observations`, `in_flight` batches at a time (so memory
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
    batch_bytes = index = 0
    identity = RowIdentity()
    with _reading("importing", source.label, facts.size) as update, \
            ThreadPoolExecutor(max_workers=in_flight) as pool:
        def flush() -> None:
            nonlocal batch, where, batch_bytes
            pending.append((pool.submit(api.request, "POST", "/v1/observations",
                                        {"items": batch}), where))
            batch, where, batch_bytes = [], [], 0
            while len(pending) >= in_flight:
                collect(*pending.pop(0))

        read = 0

        def on_read(n: int) -> None:
            nonlocal read
            read = n

        for row in stream_rows(source, options, on_read):
            if isinstance(row, RowError):
                note({"index": index, "line": row.line, "field": row.field, "code": row.code,
                      "message": row.message})
            else:
                ident = observation_id(prefix, options.deployment,
                                       identity.row_key(row.content, row.arrival_ns),
                                       placement.placed_ns(row.arrival_ns))
                item = observation_item(row, options, ident, provenance, placement)
                size = _row_bytes(item)
                if batch and batch_bytes + size > BATCH_BYTES:
                    flush()
                batch.append(item)
                batch_bytes += size
                where.append((index, row.line))
                if len(batch) == MAX_BATCH:
                    flush()
            index += 1
            update(read, index)
        if batch:
            flush()
        for done, at in pending:
            collect(done, at)
    if identity.digest() != facts.rows_sha256:
        raise CliError("The file changed while it was being imported: import it again (rows "
                       "already sent are kept, and counted as already present).", 2)
    errors.sort(key=lambda e: e["index"])
    return totals
