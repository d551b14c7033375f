"""Deterministic digests: one fixed window of observations, built again and again — by the stack
(repeatedly, per tenant, after shuffled and re-sent ingestion, and sent in batches of 1, 7 and
500, so stored in segments of every size), by another process reading the stored segments, and
recomputed from the document by RFC 8785 — always gives the same digest; one changed record gives
another; `trace verify` accepts any re-serialization and refuses any changed value."""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from infercrane.qualify.common import bucket_name, missing_routes, table_name
from infercrane.qualify.core import PromiseResult
from infercrane.qualify.target import Target

PROMISE = "deterministic digests"
UNTIL = "2025-11-24T17:00:00.000Z"
WINDOW = "1h"
RECORDS = 60
# The same window sent in batches of these sizes (1 to the API's most), each to a tenant of its
# own: a batch is stored as a segment, so these are the segments of one row, of a few, and of the
# whole window; each batch of 7 is sent twice (the re-send stores no second copy).
BATCHES = (1, 7, 500)
RESENT = 7


def fixed_observations(deployment: str, n: int = RECORDS, seed: int = 10) -> list[dict[str, Any]]:
    """The qualification window: fixed values (no identities, which are per-tenant HMACs), some
    arrivals sharing a millisecond so ties are broken by observation id."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ms = 16 * 3_600_000 + (i // 2) * 50_000 + rng.randrange(0, 3)  # pairs may tie
        latency = round(rng.uniform(80, 9000), 1)
        out.append({
            "observation_id": f"qual-digest-{i:04d}", "deployment": deployment,
            "arrival": f"2025-11-24T{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:"
                       f"{ms // 1000 % 60:02d}.{ms % 1000:03d}Z",
            "input_tokens": rng.randrange(1, 30_000), "output_tokens": rng.randrange(1, 2_000),
            "ttft_ms": round(latency * rng.uniform(0.05, 0.5), 1), "latency_ms": latency,
            "outcome": rng.choice(["ok", "ok", "ok", "server_error", "timeout"]),
            "streaming": bool(i % 2)})
    return out


def document_digest(document: Mapping[str, Any]) -> str:
    """The contract's digest: sha256 over RFC 8785 of the document without `digest` and `build`,
    by the `rfc8785` library itself, never the service's fast path (the code under test)."""
    import rfc8785

    content = {k: v for k, v in document.items() if k not in ("digest", "build")}
    return "sha256:" + hashlib.sha256(rfc8785.dumps(content)).hexdigest()


def ingest(target: Target, tenant: str, items: Sequence[Mapping[str, Any]], batch: int,
           sends: int = 1) -> bool:
    """Every batch sent `sends` times in a row, each answered 200 with nothing rejected."""
    ok = True
    for i in range(0, len(items), batch):
        for _ in range(sends):
            reply = target.request("POST", "/v1/observations", tenant=tenant,
                                   body={"items": list(items[i:i + batch])})
            doc = reply.doc if isinstance(reply.doc, dict) else {}
            ok &= reply.status == 200 and doc.get("rejected") == 0
    return ok


def build(target: Target, tenant: str, deployment: str) -> tuple[int, str | None]:
    reply = target.request("POST", "/v1/traces", tenant=tenant,
                           body={"deployment": deployment, "window": WINDOW, "until": UNTIL,
                                 "max_requests": 1000})
    doc = reply.doc if isinstance(reply.doc, dict) else {}
    return reply.status, doc.get("digest")


# -- a build in another process ------------------------------------------------------------------
def build_in_process(aws_endpoint: str, table: str, bucket: str, tenant: str,
                     deployment: str) -> str:
    """Reads the stack's segments from this process (its own hash seed, its own reads)."""
    import boto3

    from infercrane.adapters.segments.store import SegmentObservationStore
    from infercrane.clock import utcnow
    from infercrane.domain.replay import TraceService

    session = boto3.session.Session()
    store = SegmentObservationStore(
        session.client("s3", endpoint_url=aws_endpoint, region_name="us-east-1"),
        session.client("dynamodb", endpoint_url=aws_endpoint, region_name="us-east-1"),
        bucket, table, 30)
    service = TraceService(store, None, None)  # type: ignore[arg-type]
    until = datetime.fromisoformat(UNTIL.replace("Z", "+00:00"))
    doc = service.build_document(tenant, deployment, WINDOW, until, 1000, utcnow())
    return str(doc["digest"])


def worker_main(argv: Sequence[str]) -> None:  # pragma: no cover - runs in a child process
    args = json.loads(argv[0])
    print(json.dumps(build_in_process(args["aws"], args["table"], args["bucket"], args["tenant"],
                                      args["deployment"])))


def build_in_subprocess(target: Target, tenant: str, deployment: str) -> str:
    import os

    env = {**os.environ, **target.aws_env()}
    payload = json.dumps({"aws": target.aws_endpoint, "table": table_name(target, "ObservationsTable"),
                          "bucket": bucket_name(target, "DocumentsBucket"),
                          "tenant": tenant, "deployment": deployment})
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", "import sys; from infercrane.qualify.deterministic_digests import "
         "worker_main; worker_main(sys.argv[1:])", payload],
        capture_output=True, text=True, timeout=120, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError("digest worker failed: " + done.stderr[-500:])
    return str(json.loads(done.stdout.strip().splitlines()[-1]))


# -- the checks -----------------------------------------------------------------------------------
def check_verify(cli: Callable[..., subprocess.CompletedProcess[str]], document: Mapping[str, Any],
                 result: PromiseResult) -> None:
    """`trace verify FILE` (its own process): any re-serialization verifies, any change fails."""
    with tempfile.TemporaryDirectory() as tmp:
        resaved = Path(tmp, "resaved.json")
        resaved.write_text(json.dumps(dict(reversed(list(document.items()))), indent=3,
                                      ensure_ascii=True))
        tampered_doc = json.loads(json.dumps(document))
        tampered_doc["records"][len(tampered_doc["records"]) // 2]["output_tokens"] += 1
        tampered = Path(tmp, "tampered.json")
        tampered.write_text(json.dumps(tampered_doc))
        ok = cli("trace", "verify", str(resaved))
        bad = cli("trace", "verify", str(tampered))
    result.check("trace verify: a re-serialized document verifies", ok.returncode == 0,
                 ok.stderr[-300:])
    # 5 is "verification failed" (1 would be a service failure, not a verdict).
    result.check("trace verify: a changed record fails", bad.returncode == 5, bad.stdout[-300:])


def batched(target: Target, items: Sequence[Mapping[str, Any]], deployment: str,
            ) -> dict[int, str | None]:
    """Each batch size's digest, the window sent to a fresh tenant (tenants are not part of the
    document) in batches of that size; None when the tenant, the ingest or the build failed."""
    digests: dict[int, str | None] = {}
    for size in BATCHES:
        tenant = f"qualbatch{secrets.token_hex(3)}"
        try:
            target.create_tenant(tenant)
        except RuntimeError:
            digests[size] = None
            continue
        sent = ingest(target, tenant, items, size, sends=2 if size == RESENT else 1)
        digests[size] = build(target, tenant, deployment)[1] if sent else None
    return digests


def check_batches(digests: Mapping[int, str | None], reference: str,
                  result: PromiseResult) -> None:
    """Each batch size's digest against the stack's first one."""
    for size, d in sorted(digests.items()):
        resent = ", each batch sent twice" if size == RESENT else ""
        result.check(f"batches of {size}{resent}: same digest", d == reference, str(d))


def run(target: Target) -> PromiseResult:
    result = PromiseResult(PROMISE)
    missing = missing_routes(target, [("POST", "/v1/observations"), ("POST", "/v1/traces")])
    if missing:
        return result.not_available(", ".join(missing))
    # Fixed: the deployment is part of the document, and the digest of this window is evidence.
    deployment = "qualify-digests"
    items = fixed_observations(deployment)
    result.check("ingest in order (batches of 25)", ingest(target, "demo", items, 25))
    status, d1 = build(target, "demo", deployment)
    result.check("first build answers 201 with a digest", status in (200, 201) and bool(d1),
                 f"HTTP {status}")
    if not d1:
        return result
    repeats = [build(target, "demo", deployment) for _ in range(3)]
    result.check("the same window built 3 more times: same digest",
                 all(d == d1 for _, d in repeats), json.dumps(repeats))
    result.check("a rebuild answers 200 (the stored trace, not a new one)",
                 all(s == 200 for s, _ in repeats), json.dumps([s for s, _ in repeats]))
    # Another tenant, shuffled, small batches, every item sent twice: order and re-sends are noise.
    shuffled = list(items)
    random.Random(7).shuffle(shuffled)
    result.check("other tenant: shuffled ingest, batches of 7, each item twice",
                 ingest(target, "other", shuffled + shuffled[::-1], 7))
    _, d2 = build(target, "other", deployment)
    result.check("other tenant, other insertion order: same digest", d2 == d1, f"{d2} vs {d1}")
    # The document itself, recomputed here by RFC 8785.
    reply = target.request("GET", f"/v1/traces/{d1}/document", tenant="demo")
    document = reply.doc if reply.status == 200 and isinstance(reply.doc, dict) else None
    result.check("document fetched", document is not None, f"HTTP {reply.status}")
    if document is not None:
        result.check("digest recomputed from the document (RFC 8785, this process)",
                     document_digest(document) == d1 == document.get("digest"))
        result.check("document holds the whole window", document.get("sample_count") == RECORDS,
                     str(document.get("sample_count")))
    # However the window was cut into segments, and whether a batch was sent again.
    check_batches(batched(target, items, deployment), d1, result)
    try:
        d4 = build_in_subprocess(target, "demo", deployment)
        result.check("another process, reading the segments: same digest", d4 == d1, d4)
    except Exception as exc:
        result.check("another process builds the window", False, f"{type(exc).__name__}: {exc}")
    # One changed record, in a fresh tenant so everything else is identical.
    try:
        third = f"qualdigest{secrets.token_hex(3)}"  # tenants are not part of the document
        target.create_tenant(third)
        changed = json.loads(json.dumps(items))
        changed[RECORDS // 3]["output_tokens"] += 1
        ingest(target, third, changed, 25)
        _, d3 = build(target, third, deployment)
        result.check("one changed record: a different digest", bool(d3) and d3 != d1, str(d3))
    except RuntimeError as exc:
        result.check("one changed record: a different digest", False, str(exc))
    if document is not None:
        help_ = target.cli("trace", "verify", "--help")
        if help_.returncode == 0:
            check_verify(target.cli, document, result)
        else:
            missing.append("CLI `trace verify`")
    result.tried = (f"{RECORDS}-record window: 4 builds in the stack, 2 tenants x 2 insertion orders "
                    f"with re-sends, {len(BATCHES)} tenants sent batches of {list(BATCHES)} (of "
                    f"{RESENT} twice), 1 build in another process, RFC 8785 recomputation, "
                    "1 changed record, trace verify ±")
    # The window is fixed, so its digest is evidence: the same commit must give the same value.
    result.facts = {"window": {"until": UNTIL, "window": WINDOW, "records": RECORDS},
                    "digest": d1}
    if missing:
        result.not_available(", ".join(missing))
    return result
