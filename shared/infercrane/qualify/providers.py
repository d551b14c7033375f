"""Provider qualification: the adapter and cache scenarios against real clouds, gated on
credentials and a configured target. Never part of `make test`.

Settings (environment):
  INFERCRANE_QUALIFY_MODEL           model-identity digest the provider artifacts bind (sha256:<64 hex>)
  AWS   INFERCRANE_QUALIFY_AWS_SNAPSHOT  EBS snapshot id binding the model in its Description
        INFERCRANE_QUALIFY_AWS_AZ        availability zone to prefetch into (e.g. us-east-1a)
        credentials: the standard AWS chain (AWS_PROFILE, env keys, SSO, instance role)
  GCP   INFERCRANE_QUALIFY_GCP_PROJECT, INFERCRANE_QUALIFY_GCP_ZONE, INFERCRANE_QUALIFY_GCP_SNAPSHOT
        credentials: Application Default Credentials
  Kubernetes INFERCRANE_QUALIFY_KUBECONFIG, INFERCRANE_QUALIFY_K8S_NAMESPACE,
        INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT
  INFERCRANE_QUALIFY_REPEATS         prefetch repetitions per provider (default 5)

Everything created is tagged `infercrane:qualification=<run id>`; the run lists leftovers of
earlier runs first (the dry run), and deletes what it created before it ends.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from infercrane.qualify.core import PromiseResult

QUALIFICATION_TAG = "infercrane:qualification"
NEEDS = ("provider qualification skipped: needs credentials and a target — set INFERCRANE_QUALIFY_MODEL "
         "plus AWS (INFERCRANE_QUALIFY_AWS_SNAPSHOT, INFERCRANE_QUALIFY_AWS_AZ, AWS credentials), GCP "
         "(INFERCRANE_QUALIFY_GCP_PROJECT/_ZONE/_SNAPSHOT, ADC) or Kubernetes "
         "(INFERCRANE_QUALIFY_KUBECONFIG/_K8S_NAMESPACE/_K8S_VOLUMESNAPSHOT); see docs/qualification.md")


@dataclass(frozen=True)
class AwsTarget:
    model: str
    snapshot: str
    zone: str
    repeats: int

    @property
    def region(self) -> str:
        return self.zone[:-1]


def configured(env: Mapping[str, str]) -> dict[str, Any]:
    """The providers whose target is fully configured (credentials are checked when used)."""
    model = env.get("INFERCRANE_QUALIFY_MODEL", "")
    repeats = int(env.get("INFERCRANE_QUALIFY_REPEATS", "5") or 5)
    out: dict[str, Any] = {}
    if not model:
        return out
    if env.get("INFERCRANE_QUALIFY_AWS_SNAPSHOT") and env.get("INFERCRANE_QUALIFY_AWS_AZ"):
        out["aws"] = AwsTarget(model, env["INFERCRANE_QUALIFY_AWS_SNAPSHOT"],
                               env["INFERCRANE_QUALIFY_AWS_AZ"], repeats)
    if all(env.get(f"INFERCRANE_QUALIFY_GCP_{k}") for k in ("PROJECT", "ZONE", "SNAPSHOT")):
        out["gcp"] = {k: env[f"INFERCRANE_QUALIFY_GCP_{k}"] for k in ("PROJECT", "ZONE", "SNAPSHOT")}
    if env.get("INFERCRANE_QUALIFY_KUBECONFIG") and env.get("INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT"):
        out["kubernetes"] = {"kubeconfig": env["INFERCRANE_QUALIFY_KUBECONFIG"]}
    return out


def aws_credentials_present() -> bool:
    try:
        import boto3

        return boto3.session.Session().get_credentials() is not None
    except Exception:
        return False


def quantile(values: list[float], q: float) -> float | None:
    """Lower nearest rank (the capacity report's exact method)."""
    if not values:
        return None
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def leftovers(ec2: Any) -> list[str]:
    vols = ec2.describe_volumes(Filters=[{"Name": "tag-key", "Values": [QUALIFICATION_TAG]}])
    return sorted(v["VolumeId"] for v in vols.get("Volumes", []))


def run_aws(t: AwsTarget, ec2: Any, dry_run: bool, wait_s: float = 600.0,
            poll_s: float = 1.0) -> PromiseResult:
    """Verify the snapshot, then prefetch it `repeats` times (volume from snapshot until
    `available`: the time a cache miss costs before the artifact is present), classify failures
    as the capacity report would, and delete every volume created."""
    from botocore.exceptions import ClientError

    from infercrane.domain.providers.model import check_binding

    result = PromiseResult("aws cache and capacity")
    run_id = "q" + secrets.token_hex(6)
    old = leftovers(ec2)
    click.echo(f"aws dry run: would create {t.repeats} volume(s) from {t.snapshot} in {t.zone}, "
               f"tagged {QUALIFICATION_TAG}={run_id}; leftovers of earlier runs: {old or 'none'}",
               err=True)
    if dry_run:
        result.check("dry run listed planned and leftover resources", True)
        result.tried = "dry run only"
        return result
    snap = ec2.describe_snapshots(SnapshotIds=[t.snapshot])["Snapshots"][0]
    result.check("snapshot completed", snap.get("State") == "completed", str(snap.get("State")))
    result.check("snapshot encrypted", bool(snap.get("Encrypted")))
    result.check("snapshot binds the model digest in its description",
                 check_binding(snap.get("Description"), t.model, "snapshot description") is None)
    timings: list[float] = []
    outcomes: dict[str, int] = {}
    created: list[str] = []
    try:
        for _ in range(t.repeats):
            t0 = time.monotonic()
            try:
                vol = ec2.create_volume(SnapshotId=t.snapshot, AvailabilityZone=t.zone,
                                        VolumeType="gp3", TagSpecifications=[{
                                            "ResourceType": "volume",
                                            "Tags": [{"Key": QUALIFICATION_TAG, "Value": run_id}]}])
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "unknown")
                outcomes[code] = outcomes.get(code, 0) + 1
                continue
            created.append(vol["VolumeId"])
            state = ""
            while time.monotonic() - t0 < wait_s:
                state = ec2.describe_volumes(VolumeIds=[vol["VolumeId"]])["Volumes"][0]["State"]
                if state in ("available", "error"):
                    break
                time.sleep(poll_s)
            outcomes[state or "timeout"] = outcomes.get(state or "timeout", 0) + 1
            if state == "available":
                timings.append(round(time.monotonic() - t0, 3))
            ec2.delete_volume(VolumeId=vol["VolumeId"])
    finally:
        for vid in created:
            with contextlib.suppress(ClientError):  # already deleted above
                ec2.delete_volume(VolumeId=vid)
    mine = [v for v in leftovers(ec2) if v in created]
    result.check("every created volume was deleted", not mine, str(mine))
    result.check("at least one prefetch reached available", bool(timings))
    result.tried = f"{t.repeats} prefetches from {t.snapshot} in {t.zone}"
    result.facts = {"prefetch_to_available_s": {"n": len(timings), "p50": quantile(timings, 0.5),
                                                "p95": quantile(timings, 0.95), "values": timings},
                    "outcomes": outcomes, "zone": t.zone}
    return result


def main(evidence_path: Path | None, dry_run: bool = False, json_output: bool = False,
         env: Mapping[str, str] | None = None) -> int:
    import json

    from infercrane.clock import rfc3339, utcnow
    from infercrane.qualify.core import TABLE_COLUMNS, table_rows
    from infercrane.qualify.evidence import evidence_document, git_commit, write

    env = os.environ if env is None else env
    targets = configured(env)
    if "aws" in targets and not aws_credentials_present():
        targets.pop("aws")
    if not targets:
        click.echo(NEEDS)
        return 0
    started = rfc3339(utcnow())
    results: list[PromiseResult] = []
    if "aws" in targets:
        import boto3

        t = targets["aws"]
        results.append(run_aws(t, boto3.session.Session(region_name=t.region).client("ec2"), dry_run))
    for name in ("gcp", "kubernetes"):
        if name in targets:
            results.append(PromiseResult(f"{name} cache and capacity").not_available(
                f"{name} provider scenarios are not implemented in this build"))
    commit = git_commit()
    doc = evidence_document(results, "provider-qualification",
                            {"started_at": started, "finished_at": rfc3339(utcnow())}, commit)
    path = evidence_path or Path(".qualify") / f"provider-qualification-{commit[:12]}.json"
    write(doc, path)
    if json_output:
        click.echo(json.dumps(doc))
    else:
        from infercrane.cli.qualify import print_table

        print_table("provider qualification", TABLE_COLUMNS, table_rows(results))
        click.echo(f"evidence: {path} (digest {doc['digest']}, commit {commit})")
    return 0 if doc["ok"] or dry_run else 1
