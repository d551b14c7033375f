"""`infercrane qualify`: prove the service's promises locally, or against real providers."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from infercrane.cli.client import CliError
from infercrane.cli.output import banner

DEFAULT_EVIDENCE = Path(".qualify")


@click.command("qualify", epilog="""\b
Examples:
  infercrane qualify --local
  infercrane qualify --local --evidence /tmp/local-qualification.json
  infercrane qualify --local --only tenancy --only aggregation
  infercrane qualify --local --ready-file /tmp/ready.json --stack-log /tmp/serve.log
  infercrane qualify --providers
\b
--local starts its own `infercrane local serve` in a subprocess (schedules off; the suite fires
them itself), or attaches to a running one through its ready line (--ready-file; --endpoint
overrides the endpoint in it). It prints one row per promise and writes an evidence document
(class local-qualification) whose digest is the same for every run of the same commit.
--providers runs the adapter and cache scenarios against real AWS/GCP/Kubernetes when
credentials and a target are configured (docs/qualification.md); without them it says what it
needs in one line and exits 0.
\b
Exit codes: 0 every promise held (or providers skipped), 1 a promise failed, 2 bad usage.""")
@click.option("--local", "mode", flag_value="local", help="Run the local qualification suite.")
@click.option("--providers", "mode", flag_value="providers",
              help="Run the provider qualification (needs credentials and a target).")
@click.option("--evidence", "evidence_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the evidence JSON (default: .qualify/<class>-<commit>.json).")
@click.option("--ready-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Attach to a running local stack through its ready line instead of starting one.")
@click.option("--stack-log", type=click.Path(dir_okay=False, path_type=Path),
              help="The attached stack's stderr, scanned for canaries (with --ready-file).")
@click.option("--only", multiple=True, metavar="PROMISE",
              help="Run only these promise modules (repeatable): capture_privacy, "
                   "deterministic_digests, tenancy, aggregation, delegated_prefetch.")
@click.option("--dry-run", is_flag=True,
              help="--providers: list what would be created and what is left over, change nothing.")
@click.pass_context
def command(ctx: click.Context, mode: str | None, evidence_path: Path | None,
            ready_file: Path | None, stack_log: Path | None, only: tuple[str, ...],
            dry_run: bool) -> None:
    """Qualify the service: one row per promise, an evidence document, a non-zero exit on failure.

    Local qualification proves capture privacy, deterministic digests, tenancy, aggregation and
    delegated prefetch semantics. Real cache behaviour and capacity distributions need the
    provider run (--providers).
    """
    if mode is None:
        raise CliError("Choose --local or --providers (see --help).", 2)
    if mode == "providers":
        code = run_providers(evidence_path, dry_run=dry_run, json_output=ctx.obj.output == "json")
        ctx.exit(code)
        return
    from infercrane.qualify.suite import PROMISE_MODULES

    unknown = sorted(set(only) - set(PROMISE_MODULES))
    if unknown:
        raise CliError(f"--only: unknown promise module; choose from {', '.join(PROMISE_MODULES)}.", 2)
    modules = [m for m in PROMISE_MODULES if not only or m in only]
    if ctx.obj.endpoint and not ready_file:
        raise CliError("--endpoint needs --ready-file: local qualification also reads the stack's "
                       "storage (moto) and needs its tenant and admin keys.", 2)
    code = _run_local(ctx, modules, evidence_path, ready_file, stack_log)
    ctx.exit(code)


def run_providers(evidence_path: Path | None, dry_run: bool = False, json_output: bool = False,
                  env: Mapping[str, str] | None = None) -> int:
    """`qualify --providers`: qualify/providers.py runs and writes the evidence, this prints it."""
    from infercrane.qualify import providers
    from infercrane.qualify.core import TABLE_COLUMNS, table_rows

    done = providers.run(evidence_path, dry_run=dry_run, env=env,
                         echo=lambda line: click.echo(line, err=True))
    if done is None:
        click.echo(providers.NEEDS)
        return 0
    if json_output:
        click.echo(json.dumps(done.doc))
    else:
        print_table("provider qualification", TABLE_COLUMNS, table_rows(done.results))
        click.echo(f"evidence: {done.path} (digest {done.doc['digest']}, commit {done.commit})")
    return 0 if done.doc["ok"] or dry_run else 1


def _run_local(ctx: click.Context, modules: list[str], evidence_path: Path | None,
               ready_file: Path | None, stack_log: Path | None) -> int:
    from infercrane.clock import rfc3339, utcnow
    from infercrane.qualify.core import TABLE_COLUMNS, PromiseResult, table_rows
    from infercrane.qualify.evidence import evidence_document, git_commit, write
    from infercrane.qualify.suite import run_suite
    from infercrane.qualify.target import local_stack, target_from_ready

    started, t0 = rfc3339(utcnow()), time.monotonic()
    commit = git_commit()

    def on_start(name: str) -> None:
        banner(f"qualifying: {name} …")

    def on_done(r: PromiseResult) -> None:
        banner(f"  {r.promise}: {'PASS' if r.ok else 'FAIL'} ({r.passed}/{len(r.checks)} checks)")

    build: dict[str, Any] = {"started_at": started}
    if ready_file is not None:
        target = target_from_ready(json.loads(ready_file.read_text()), stack_log,
                                   endpoint=ctx.obj.endpoint or None)
        build["stack"] = {"attached": True, "endpoint": target.endpoint}
        results = run_suite(target, modules, on_start, on_done)
    else:
        with tempfile.TemporaryDirectory(prefix="infercrane-qualify-") as tmp:
            banner("starting a local stack for qualification (infercrane local serve) …")
            # DEBUG, so the privacy scan of the stack log covers the most verbose logging.
            with local_stack(Path(tmp), log_level="DEBUG") as target:
                build["stack"] = {"attached": False, "endpoint": target.endpoint}
                results = run_suite(target, modules, on_start, on_done)
    build.update(finished_at=rfc3339(utcnow()), duration_s=round(time.monotonic() - t0, 1))
    doc = evidence_document(results, "local-qualification", build, commit)
    path = evidence_path or DEFAULT_EVIDENCE / f"local-qualification-{commit[:12]}.json"
    write(doc, path)
    if ctx.obj.output == "json":
        click.echo(json.dumps(doc))
    else:
        print_table("local qualification", TABLE_COLUMNS, table_rows(results))
        for r in results:
            for c in r.failures(5):
                click.echo(f"  ✗ {r.promise}: {c.name}" + (f" — {c.detail.splitlines()[0][:160]}"
                                                          if c.detail else ""))
        click.echo(f"evidence: {path} (digest {doc['digest']}, commit {commit})")
    banner(f"evidence written to {path}")
    return 0 if doc["ok"] else 1


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """The results table; promise names never wrap, what was tried folds."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=160)
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, no_wrap=i < len(columns) - 1, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    console.print(t)
