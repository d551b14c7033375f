"""`infercrane lifecycle import FILE`: lifecycle attempts from a JSONL file, in batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from infercrane.cli.client import CliError
from infercrane.cli.output import emit, progress, table
from infercrane.domain.batch import MAX_BATCH


@click.group("lifecycle")
def command() -> None:
    """Lifecycle attempts (create/start/scale/update of GPU deployments)."""


def _read(file: Path) -> tuple[list[Any], list[tuple[int, int]], list[dict[str, Any]]]:
    """Records, their (record index, line number), and errors for lines that are not objects.
    A record is a non-blank line; `index` counts records from 0."""
    items: list[Any] = []
    lines: list[tuple[int, int]] = []
    errors: list[dict[str, Any]] = []
    index = 0
    with file.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                record = None
            if not isinstance(record, dict):
                errors.append({"index": index, "line": number, "field": None, "code": "invalid_json",
                               "message": "The line is not a JSON object."})
            else:
                items.append(record)
                lines.append((index, number))
            index += 1
    return items, lines, errors


@command.command("import", epilog="""\b
Examples:
  infercrane lifecycle import attempts.jsonl
  infercrane lifecycle import attempts.jsonl --output json
\b
One attempt per line, e.g.
  {"attempt_id": "a-1", "deployment": "coder", "operation": "create", "adapter": "aws",
   "runtime": "vllm", "compute_mode": "spot", "region": "us-east-1", "zone": "us-east-1a",
   "gpu": "H100", "gpu_count": 8, "started_at": "2026-11-29T20:00:00Z",
   "finished_at": "2026-11-29T20:04:10Z", "outcome": "failed",
   "error_code": "InsufficientInstanceCapacity", "error_message": "..."}
Importing the same file again stores nothing new (attempt ids are idempotent).
Exit codes: 0 all accepted, 2 some lines rejected or bad input, 1 service failure.""")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def import_file(ctx: click.Context, file: Path) -> None:
    """Import lifecycle attempts from a JSONL FILE (batches of the API's limit, 500)."""
    items, lines, errors = _read(file)
    api = ctx.obj.api()
    accepted = 0
    with progress(f"importing {file.name}", len(items)) as advance:
        for offset in range(0, len(items), MAX_BATCH):
            batch = items[offset:offset + MAX_BATCH]
            doc = api.request("POST", "/v1/lifecycle-attempts", {"items": batch})
            accepted += int(doc["accepted"])
            for err in doc.get("errors", []):
                index, line = lines[offset + int(err["index"])]
                errors.append({**err, "index": index, "line": line})
            advance(len(batch))
    errors.sort(key=lambda e: e["line"])
    document = {"accepted": accepted, "rejected": len(errors), "errors": errors}

    def render(console: Console, d: dict[str, Any]) -> None:
        console.print(f"imported {file.name}: {d['accepted']} accepted, {d['rejected']} rejected")
        if d["errors"]:
            console.print(table("rejected lines (first 20)", ["line", "field", "code", "message"],
                                [(e["line"], e["field"], e["code"], e["message"])
                                 for e in d["errors"][:20]]))

    emit(ctx, document, render)
    if errors:
        raise CliError(f"{len(errors)} lines were rejected.", 2)
