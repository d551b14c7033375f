"""`infercrane prefetch ...`: durable, idempotent prefetch requests executed by an adapter."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from infercrane.cli.output import emit

EPILOG = """\b
Examples:
  infercrane prefetch request --model sha256:3f9a...c2 --adapter aws \\
      --location us-east-1a --source snap-0123456789abcdef0
  infercrane prefetch request --model sha256:3f9a...c2 --adapter gcp \\
      --location us-central1-a --source projects/p/global/snapshots/llama-70b
  infercrane prefetch request --model sha256:3f9a...c2 --adapter kubernetes \\
      --location prod-eks/models --source models/llama-70b-snap
  infercrane prefetch status pf_5a35..._1
  infercrane prefetch release pf_5a35..._1

\b
Requests are idempotent per (model, adapter, location): repeating one answers the same
request; a different --source for an active request is refused. Once a request has completed
or failed, a new one starts the next attempt. A request's status says what the adapter did;
whether the model is ready is only ever `infercrane cache status`."""


@click.group("prefetch", epilog=EPILOG)
def command() -> None:
    """Ask an infrastructure adapter to prefetch a model where it will run."""


def _render(console: Any, d: dict[str, Any]) -> None:
    console.print(f"{d['id']}  {d['status']}  attempt {d['attempt']}")
    console.print(f"  {d['model']} -> {d['adapter']} {d['location']} (source {d['source']})")
    if d.get("failure_reason"):
        console.print(f"  failure: {d['failure_reason']}")
    if d.get("redispatches"):
        console.print(f"  re-dispatched {d['redispatches']} times after its adapter went silent")
    for k, v in sorted((d.get("resources") or {}).items()):
        console.print(f"  {k}: {v}")
    console.print(f"  readiness: infercrane cache status --model {d['model']} "
                  f"--adapter {d['adapter']} --location {d['location']}")


@command.command("request", epilog=EPILOG)
@click.option("--model", required=True, metavar="DIGEST", help="Model-identity digest.")
@click.option("--adapter", required=True, type=click.Choice(["aws", "gcp", "kubernetes"]))
@click.option("--location", required=True, metavar="L",
              help="AZ (us-east-1a), GCP zone (us-central1-a) or cluster/namespace.")
@click.option("--source", required=True, metavar="REF",
              help="Where the adapter finds the artifact (snapshot id, disk image, ...).")
@click.pass_context
def request(ctx: click.Context, model: str, adapter: str, location: str, source: str) -> None:
    """Request a prefetch (202 new, or the existing active request)."""
    doc = ctx.obj.api().request("POST", "/v1/prefetch-requests", {
        "model": model, "adapter": adapter, "location": location, "source": source})
    emit(ctx, doc, _render)


@command.command("status")
@click.argument("request_id", metavar="ID")
@click.pass_context
def status(ctx: click.Context, request_id: str) -> None:
    """Status of prefetch request ID."""
    doc = ctx.obj.api().request("GET", f"/v1/prefetch-requests/{quote(request_id, safe='')}")
    emit(ctx, doc, _render)


@command.command("release")
@click.argument("request_id", metavar="ID")
@click.pass_context
def release(ctx: click.Context, request_id: str) -> None:
    """Ask the adapter to release what it provisioned for request ID."""
    doc = ctx.obj.api().request("POST",
                                f"/v1/prefetch-requests/{quote(request_id, safe='')}/release")
    emit(ctx, doc, _render)
