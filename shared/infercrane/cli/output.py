"""Output modes: a readable table on stdout, or with `--output json` exactly the API's JSON.
Progress bars and banners always go to stderr so stdout stays machine-readable."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.cells import cell_len
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


def _least_width(t: Table) -> int:
    """The narrowest grid that cuts no word: each column as wide as its longest word (rich's own
    measure lets a column shrink below that, then cuts), plus padding and the rules between."""
    words = [max((cell_len(w) for v in (c.header, *c.cells) for w in str(v).split()), default=0)
             for c in t.columns]
    return sum(w + 2 * t.padding[1] for w in words) + len(words) + 1


def print_table(console: Console, t: Table, keys: int = 1) -> None:
    """`t` as a grid when it fits the console's width, else one block per row.

    A grid narrower than its columns' longest words makes rich cut every header to `ada…`
    (80 columns, or any pipe: rich then assumes 80 unless COLUMNS says otherwise), so a wide
    table is printed vertically instead: each row's first `keys` cells as its heading, then one
    `column  value` line per other column. Nothing is cut at any width."""
    if _least_width(t) <= console.width:
        console.print(t)
        return
    headers = [str(c.header) for c in t.columns]
    cells = [[str(v) for v in c.cells] for c in t.columns]
    if t.title:
        console.print(t.title)
    named = [h for h in headers[:keys] if h]
    if named:
        console.print("each block: " + " · ".join(named))
    pad = max(len(h) for h in headers[keys:])
    for i, row in enumerate(t.rows):
        marks = [col[i] for h, col in zip(headers[:keys], cells[:keys], strict=True) if not h]
        named_cells = [col[i] for h, col in zip(headers[:keys], cells[:keys], strict=True) if h]
        heading = " ".join(v for v in [*marks, " · ".join(named_cells)] if v)
        console.print()
        console.print(heading or f"#{i + 1}", style=row.style or None)
        for h, col in zip(headers[keys:], cells[keys:], strict=True):
            console.print(f"  {h:<{pad}}  {col[i]}")
    if t.caption:
        console.print()
        console.print(t.caption)


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
