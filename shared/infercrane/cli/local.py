"""`infercrane local ...`: the embedded local stack."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from infercrane.cli.client import ApiClient, CliError


@click.group("local")
def command() -> None:
    """Run the service on this machine: moto for AWS, each function from its built artifact."""


@command.command("serve", epilog="""\b
Examples:
  infercrane local serve
  infercrane local serve --port 8080 --tenant acme --tenant globex --ready-file /tmp/ready.json
\b
The ready line (stdout and --ready-file) is one JSON object:
  {"endpoint": "http://127.0.0.1:P", "aws_endpoint": "http://127.0.0.1:Q",
   "tenants": {"demo": "ick_..."}, "admin_key": "icadmin_...", "admin_auth": "key",
   "signing_key_id": "...", "aws_credentials": {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}}
\b
The local AWS endpoint authorizes every request (each function runs with its own role):
aws_credentials are an operator allowed everything, to inspect tables, queues and objects.
\b
With --admin-auth iam, admin routes take only SigV4 signatures (as in AWS) and the ready line
adds "admin_credentials": {"access_key_id", "secret_access_key", "region"}: export them as
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION and run `infercrane admin ...` without
--admin-key.""")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, type=click.IntRange(0, 65535), show_default=True,
              help="HTTP port of the API (0 picks a free one).")
@click.option("--aws-port", default=0, type=click.IntRange(0, 65535), show_default=True,
              help="Port of the local AWS endpoint (moto); 4566 is what events/env.json names "
                   "for `sam local invoke` (0 picks a free one).")
@click.option("--tenant", "tenants", multiple=True, metavar="NAME",
              help="Provision this tenant (repeatable; default: demo).")
@click.option("--ready-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the ready line to this file.")
@click.option("--template", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="template.yaml to build from (default: this checkout's).")
@click.option("--no-schedules", is_flag=True, help="Do not fire scheduled functions by themselves "
              "(use `infercrane local tick FUNCTION`).")
@click.option("--log-level", default="WARNING", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
              help="Log level of the functions (logs go to stderr; DEBUG also shows their raw "
                   "EMF metric lines).")
@click.option("--admin-auth", type=click.Choice(["key", "iam"]), default="key", show_default=True,
              help="How admin routes authenticate: the admin key, or SigV4 as in AWS.")
@click.option("--count-requests", is_flag=True,
              help="Count requests as AWS bills them (gateway, Lambda invocations and CPU, SQS, "
                   "S3, DynamoDB units); POST /_local/counts with the admin key answers the "
                   "totals. For the bench's cost model: it slows every AWS request.")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, aws_port: int, tenants: tuple[str, ...],
          ready_file: Path | None, template: Path | None, no_schedules: bool,
          log_level: str, admin_auth: str, count_requests: bool) -> None:
    """Start the local stack and serve until SIGINT/SIGTERM.

    moto's server provides DynamoDB, SQS, S3, Secrets Manager and EC2. Tables, queues and the
    bucket are created from template.yaml; the REST API is served over HTTP through the same
    authorizer and handlers; queues are drained into their consuming functions and schedules
    fire on time. Nothing here reaches a real cloud.

    Each function runs from its artifact (.aws-sam/build, built first if stale) in processes of
    its own, with its own IAM role and environment, its Timeout, MemorySize and Lambda's 6 MB
    payload limit enforced; API Gateway's 29 s and 10 MB limits answer 504 and 413.
    """
    import gc
    import logging
    import os

    from infercrane.domain.tenancy import validate_tenant_name
    from infercrane.errors import InvalidInput
    from infercrane.local import provider_emulators
    from infercrane.local.stack import LocalStack, find_template, ready_line

    try:
        for t in tenants:
            validate_tenant_name(t)
    except InvalidInput as exc:
        raise CliError(f"--tenant: {exc.message}", 2) from exc
    os.environ["POWERTOOLS_LOG_LEVEL"] = log_level
    logging.basicConfig(level=log_level, stream=sys.stderr)
    # Only the ready line belongs on stdout: the stack sends what its functions print (logs,
    # metrics) to stderr.
    started = time.monotonic()
    # GCE and Kubernetes emulators start only when no real endpoint is configured.
    provider_emulators.register()
    stack = LocalStack(template or find_template(), host=host, port=port, aws_port=aws_port,
                       tenants=list(tenants) or ["demo"],
                       admin_key=ctx.obj.admin_key or "", run_schedules=not no_schedules,
                       log_level=log_level, admin_auth=admin_auth,
                       count_requests=count_requests)
    stopping = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        stack.start()
        # Ready means warm: the API's and authorizer's first environments have started, so a
        # first request (an import, the demo) does not share the cores with their start-up.
        stack.wait_warm(stopping=stopping)
        if not stopping.is_set():  # stopped while starting: never say ready
            # What is loaded now lives until exit: kept out of the collector, the interpreter's
            # final collection (seconds over moto's and cfn-lint's objects) no longer delays a
            # stop.
            gc.freeze()
            line = ready_line(stack)
            if ready_file:
                ready_file.write_text(line + "\n")
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            click.echo(f"local stack ready in {time.monotonic() - started:.2f}s at "
                       f"{stack.endpoint} (Ctrl-C to stop)", err=True)
            while not stopping.wait(0.5):
                pass
    finally:
        click.echo("stopping local stack", err=True)
        stack.stop()
    # Everything is stopped and nothing is kept: skip the interpreter's final garbage collection,
    # which walked every object moto held (seconds per GiB of data: 5-10 s after a newcomer's
    # imports, 23-43 s after an afternoon) before the process could exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@command.command("build", epilog="""\b
Examples:
  infercrane local build
  infercrane local build --output json
\b
Layout (as `sam build`): .aws-sam/build/<FunctionLogicalId>/ and .aws-sam/build/<LayerLogicalId>/
python/. For the arm64/3.12 artifact to deploy, run `sam build` (README.md, "Deploy").""")
@click.option("--template", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="template.yaml to build (default: this checkout's).")
@click.pass_context
def build(ctx: click.Context, template: Path | None) -> None:
    """Build every function's artifact (its code and layers) for this Python.

    Layers hold their part of uv.lock (their requirements.txt files are regenerated from it);
    an artifact is rebuilt only when its inputs changed. `make install` runs this, and
    `infercrane local serve` runs each function from these folders.
    """
    from infercrane.local.artifacts import BuildError, build_dir
    from infercrane.local.artifacts import build as build_all
    from infercrane.local.stack import find_template
    from infercrane.local.template import load

    tpl = load(template or find_template())
    quiet = ctx.obj.output == "json"
    try:
        rebuilt = build_all(tpl, log=None if quiet else lambda m: click.echo(m, err=True))
    except BuildError as exc:
        raise CliError(str(exc), 1) from exc
    if quiet:
        click.echo(json.dumps({"build_dir": str(build_dir(tpl.path)), "rebuilt": rebuilt}))
    else:
        click.echo(f"{len(rebuilt)} of {len(tpl.layers) + len(tpl.functions)} artifacts rebuilt "
                   f"in {build_dir(tpl.path)}")


@command.command("tick")
@click.argument("function")
@click.pass_context
def tick(ctx: click.Context, function: str) -> None:
    """Fire a scheduled FUNCTION now on a running local stack (e.g. cache_sweep, aggregate).

    Needs --endpoint and the stack's --admin-key (both are in its ready line).
    """
    obj = ctx.obj
    if not obj.admin_key:
        raise CliError("local tick needs --admin-key (from the ready line).", 2)
    # A scheduled function may run up to its 5-minute timeout (the aggregator over many hours).
    client = ApiClient(obj.endpoint, obj.admin_key, timeout_s=900)
    doc = client.request("POST", f"/_local/tick/{function}")
    click.echo(json.dumps(doc) if obj.output == "json" else
               f"fired {doc['function']}: {json.dumps(doc['result'])}")


@command.command("demo")
@click.option("--keep", is_flag=True, help="Keep the demo's files (trace, exports) afterwards.")
def demo(keep: bool) -> None:
    """Run the service end to end on an in-process local stack (what `make demo` runs)."""
    import logging
    import os

    from infercrane.local.demo import run_demo

    # The demo narrates on stdout; function logs and EMF metric lines would drown it.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    logging.basicConfig(level="ERROR", stream=sys.stderr)
    run_demo(keep)
