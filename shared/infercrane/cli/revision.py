"""`infercrane revision ...`: register where a deployment's revision answers."""

from __future__ import annotations

from urllib.parse import quote

import click

from infercrane.cli.output import emit, table

EPILOG = """\b
Examples:
  infercrane revision set coder-production candidate --url http://10.0.0.7:8000 \\
      --model qwen2.5-coder-7b --api-key-env CANDIDATE_API_KEY
  infercrane revision show coder-production candidate
  infercrane replay coder-production --execute --revision candidate   # explains, sends nothing
  infercrane replay coder-production --execute --acknowledge-cost --revision candidate

--api-key-env names an environment variable; the CLI reads it when it runs AIPerf. The
credential itself is never sent to the service or stored."""


@click.group("revision", epilog=EPILOG)
def command() -> None:
    """Deployment revisions: the endpoints replay executions run against."""


def _path(deployment: str, name: str) -> str:
    return f"/v1/deployments/{quote(deployment, safe='')}/revisions/{quote(name, safe='')}"


def _render(c: object, d: dict[str, object]) -> None:
    c.print(table(f"{d['deployment']} / {d['revision']}", ["field", "value"],  # type: ignore[attr-defined]
                  [("url", d["url"]), ("model", d["model"] or "(deployment name)"),
                   ("api key from env", d["api_key_env"] or "(none)"),
                   ("updated", d["updated_at"])]))


@command.command("set", epilog=EPILOG)
@click.argument("deployment")
@click.argument("name")
@click.option("--url", required=True, metavar="URL",
              help="Base URL of the OpenAI-compatible endpoint (http or https, no credentials).")
@click.option("--model", default=None, metavar="M",
              help="Model name to request (default: the deployment name).")
@click.option("--api-key-env", default=None, metavar="VAR",
              help="NAME of the environment variable holding the endpoint's API key.")
@click.pass_context
def set_revision(ctx: click.Context, deployment: str, name: str, url: str, model: str | None,
                 api_key_env: str | None) -> None:
    """Register (or replace) revision NAME of DEPLOYMENT at URL."""
    doc = ctx.obj.api().request("PUT", _path(deployment, name),
                                {"url": url, "model": model, "api_key_env": api_key_env})
    emit(ctx, doc, _render)


@command.command("show")
@click.argument("deployment")
@click.argument("name")
@click.pass_context
def show_revision(ctx: click.Context, deployment: str, name: str) -> None:
    """Show revision NAME of DEPLOYMENT."""
    doc = ctx.obj.api().request("GET", _path(deployment, name))
    emit(ctx, doc, _render)
