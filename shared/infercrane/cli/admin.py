"""`infercrane admin ...`: tenants, API keys, HMAC key rotation, DLQ inspection and redrive, the
signing key, the migration of observations into segments."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from infercrane.cli.output import emit, table


@click.group("admin")
def command() -> None:
    """Operate the service: tenants, keys, HMAC rotation, DLQs.

    With --admin-key (a local stack's) requests carry that key. Without it they are signed with
    SigV4 from your AWS credential chain (AWS_PROFILE, environment, role), as the deployed
    stack's IAM-authorized admin routes require; the region comes from the endpoint's host, else
    AWS_REGION.
    """


@command.group("tenant")
def tenant() -> None:
    """Tenants."""


@tenant.command("create")
@click.argument("name")
@click.pass_context
def tenant_create(ctx: click.Context, name: str) -> None:
    """Create tenant NAME with its HMAC keyring and a first API key (shown once)."""
    doc = ctx.obj.admin().request("POST", "/v1/admin/tenants", {"name": name})
    emit(ctx, doc, lambda c, d: c.print(
        f"tenant {d['tenant']} created\nAPI key (shown once): {d['api_key']}\nkey id: {d['key_id']}"))


@command.group("key")
def key() -> None:
    """API keys (stored only as hashes)."""


@key.command("create")
@click.argument("tenant_name", metavar="TENANT")
@click.pass_context
def key_create(ctx: click.Context, tenant_name: str) -> None:
    """Issue a new API key for TENANT (shown once)."""
    doc = ctx.obj.admin().request("POST", f"/v1/admin/tenants/{tenant_name}/api-keys")
    emit(ctx, doc, lambda c, d: c.print(f"API key (shown once): {d['api_key']}\nkey id: {d['key_id']}"))


@key.command("revoke")
@click.argument("tenant_name", metavar="TENANT")
@click.argument("key_id")
@click.pass_context
def key_revoke(ctx: click.Context, tenant_name: str, key_id: str) -> None:
    """Revoke KEY_ID of TENANT: its next request is a 401."""
    doc = ctx.obj.admin().request("DELETE", f"/v1/admin/tenants/{tenant_name}/api-keys/{key_id}")
    emit(ctx, doc, lambda c, d: c.print(f"revoked {d['key_id']} at {d['revoked_at']}"))


@command.group("hmac")
def hmac_group() -> None:
    """Per-tenant HMAC keys."""


@hmac_group.command("rotate")
@click.argument("tenant_name", metavar="TENANT")
@click.option("--purpose", type=click.Choice(["identity", "ingest"]), default="identity",
              show_default=True, help="identity pseudonymizes ids; ingest signs queue messages.")
@click.pass_context
def hmac_rotate(ctx: click.Context, tenant_name: str, purpose: str) -> None:
    """Add a new key version: new data uses it; old versions stay for verification only."""
    doc = ctx.obj.admin().request("POST", f"/v1/admin/tenants/{tenant_name}/hmac-keys",
                                  {"purpose": purpose})
    emit(ctx, doc, lambda c, d: c.print(f"{d['tenant']} {d['purpose']} key is now {d['current_version']}"))


@command.group("dlq")
def dlq() -> None:
    """Dead-letter queues: look first, then redrive."""


@dlq.command("list")
@click.pass_context
def dlq_list(ctx: click.Context) -> None:
    """Depth of every queue and its DLQ."""
    doc = ctx.obj.admin().request("GET", "/v1/admin/dlqs")
    emit(ctx, doc, lambda c, d: c.print(table("queues", ["queue", "visible", "in flight", "DLQ"], [
        (q["name"], q["visible"], q["in_flight"], q["dlq_visible"]) for q in d["queues"]])))


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@dlq.command("show")
@click.argument("queue")
@click.option("--limit", default=10, type=click.IntRange(1, 10), show_default=True)
@click.pass_context
def dlq_show(ctx: click.Context, queue: str, limit: int) -> None:
    """Inspect QUEUE's dead letters (metadata only: sizes, receive counts, attributes)."""
    doc: dict[str, Any] = ctx.obj.admin().request("GET", f"/v1/admin/dlqs/{queue}", params={"limit": limit})
    emit(ctx, doc, lambda c, d: c.print(table(f"{queue} DLQ ({d['queue']['dlq_visible']} waiting)",
        ["message id", "receives", "sent", "bytes"],
        [(m["message_id"], m["receive_count"], _when(m["sent_at_ms"]), m["size_bytes"])
         for m in d["messages"]])))


@dlq.command("redrive")
@click.argument("queue")
@click.option("--limit", default=1000, type=click.IntRange(1, 10000), show_default=True)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def dlq_redrive(ctx: click.Context, queue: str, limit: int, yes: bool) -> None:
    """Move QUEUE's dead letters back to QUEUE (inspect with `dlq show` first)."""
    if not yes and not click.confirm(f"Redrive up to {limit} messages into {queue}?", err=True):
        raise click.exceptions.Abort
    doc = ctx.obj.admin().request("POST", f"/v1/admin/dlqs/{queue}/redrive", params={"limit": limit})
    emit(ctx, doc, lambda c, d: c.print(f"moved {d['moved']} messages back to {d['queue']}"))


@command.command("migrate-observations")
@click.argument("tenant_name", metavar="TENANT")
@click.option("--deployment", "deployments", multiple=True,
              help="Only this deployment (repeatable); default: every deployment with items of "
                   "the one-item layout.")
@click.pass_context
def migrate_observations(ctx: click.Context, tenant_name: str,
                         deployments: tuple[str, ...]) -> None:
    """Copy TENANT's observations stored one item each (before segments) into segments.

    Run once per tenant after deploying segments (docs/capture.md, Storage): new writes already
    go to segments, and reads see only segments. Idempotent: a re-run, or a run cut short and
    started again, writes nothing twice (its rows come back as already present). Progress goes
    to stderr, one line a page.
    """
    admin = ctx.obj.admin()
    names = list(deployments)
    if not names:
        cursor: str | None = None
        while True:
            listed = admin.request("GET", f"/v1/admin/tenants/{tenant_name}/legacy-deployments",
                                   params={} if cursor is None else {"cursor": cursor})
            names.extend(d for d in listed["deployments"] if d not in names)
            cursor = listed["cursor"]
            if cursor is None:
                break
    totals = []
    for name in names:
        done: dict[str, Any] = {"deployment": name, "copied": 0, "stored": 0,
                                "already_present": 0, "segments": 0}
        cursor = None
        while True:
            body: dict[str, Any] = {"deployment": name}
            if cursor is not None:
                body["cursor"] = cursor
            page = admin.request("POST", f"/v1/admin/tenants/{tenant_name}/observation-migrations",
                                 body)
            for field in ("copied", "stored", "already_present", "segments"):
                done[field] += int(page[field])
            cursor = page["cursor"]
            click.echo(f"{name}: {done['copied']} rows copied into {done['segments']} segments "
                       f"({done['already_present']} already present)"
                       + ("" if cursor is None else ", continuing"), err=True)
            if cursor is None:
                break
        totals.append(done)
    doc = {"tenant": tenant_name, "deployments": totals}
    emit(ctx, doc, lambda c, d: c.print(table(
        f"{d['tenant']}: observations in segments", ["deployment", "copied", "stored",
                                                     "already present", "segments"],
        [(t["deployment"], t["copied"], t["stored"], t["already_present"], t["segments"])
         for t in d["deployments"]])))


@command.command("signing-key")
@click.pass_context
def signing_key(ctx: click.Context) -> None:
    """Print the public key (PEM) this deployment signs evidence with.

    \b
    Save it once, then verify offline or with a standard tool:
      infercrane admin signing-key > signing-key.pem
      infercrane trace verify trace.json --public-key signing-key.pem
      cosign verify-blob-attestation --key signing-key.pem --signature trace.jsonl.intoto.jsonl \\
          --type https://infercrane.dev/attestation/aiperf-export/v1 trace.jsonl
    The route is public (no key needed): the key only lets others check signatures.
    """
    doc = ctx.obj.api().request("GET", "/v1/signing-key")
    if ctx.obj.output == "json":
        click.echo(json.dumps(doc))
    else:
        click.echo(str(doc["public_key_pem"]).rstrip("\n"))
