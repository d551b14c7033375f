"""`infercrane cache status`: the effective artifact-cache state of a model."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from infercrane.cli.output import emit, table

EPILOG = """\b
Examples:
  infercrane cache status --model sha256:3f9a...c2
  infercrane cache status --model sha256:3f9a...c2 --adapter aws --location us-east-1a
  infercrane cache status --model sha256:3f9a...c2 --adapter kubernetes --location prod/models --output json

\b
States are effective: an observation past its expiry (at most 24 h after it was made) or
without provider evidence reads `unknown`, whatever was stored. Only `present` is a hit."""


@click.group("cache")
def command() -> None:
    """Artifact-cache state, as observed by the infrastructure adapters."""


@command.command("status", epilog=EPILOG)
@click.option("--model", "model", required=True, metavar="DIGEST",
              help="Model-identity digest (sha256:<64 hex>; see `infercrane model digest`).")
@click.option("--adapter", type=click.Choice(["aws", "gcp", "kubernetes"]), default=None,
              help="Only this adapter.")
@click.option("--location", default=None, metavar="L",
              help="Only this location: an AZ (us-east-1a), a GCP zone (us-central1-a) or "
                   "cluster/namespace.")
@click.pass_context
def status(ctx: click.Context, model: str, adapter: str | None, location: str | None) -> None:
    """Effective cache state of a model per adapter and location, with age and expiry."""
    doc: dict[str, Any] = ctx.obj.api().request(
        "GET", f"/v1/cache/{quote(model, safe=':')}",
        params={"adapter": adapter, "location": location})

    def render(console: Any, d: dict[str, Any]) -> None:
        if not d["observations"]:
            console.print(f"no observations for {d['model']}: the cache state is unknown")
            return
        console.print(table(d["model"], ["adapter", "location", "state", "age", "expires",
                                         "evidence"],
                            [(o["adapter"], o["location"], o["state"], f"{o['age_s']}s",
                              o["expires_at"],
                              ", ".join(f"{k}={v}" for k, v in sorted(o["evidence"].items())))
                             for o in d["observations"]]))

    emit(ctx, doc, render)
