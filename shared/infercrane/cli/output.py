"""Output modes: a readable table on stdout, or with `--output json` exactly the API's JSON.
Progress bars and banners always go to stderr so stdout stays machine-readable."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

stderr = Console(stderr=True, highlight=False)


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=True)


def emit(ctx: click.Context, document: Any, render: Callable[[Console, Any], None] | None = None) -> None:
    if ctx.obj.output == "json" or render is None:
        click.echo(json.dumps(document, indent=None if ctx.obj.output == "json" else 2))
    else:
        render(stdout(), document)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    return t


def banner(text: str) -> None:
    stderr.print(text)


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (hidden when stderr is not a terminal and total is unknown)."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=stderr,
                   disable=not sys.stderr.isatty() and total is None, transient=False)
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
