"""Provider qualification: one adapter and cache scenario, run through the real provider adapters
(`infercrane.adapters.ec2|gce|kubernetes_pvc` behind `ProviderAdapter`) and the pure rules
(`infercrane.domain.providers.aws|gcp|kubernetes`) against real clouds, gated on credentials and
a configured target. Never part of `make test`.

Settings (environment):
  INFERCRANE_QUALIFY_MODEL           model-identity digest the provider artifacts bind (sha256:<64 hex>)
  AWS   INFERCRANE_QUALIFY_AWS_SNAPSHOT  EBS snapshot id binding the model in its Description
        INFERCRANE_QUALIFY_AWS_AZ        availability zone to prefetch into (e.g. us-east-1a)
        optional INFERCRANE_QUALIFY_AWS_KMS_KEY_ID, INFERCRANE_QUALIFY_AWS_SNAPSHOT_OWNER
        credentials: the standard AWS chain (AWS_PROFILE, env keys, SSO, instance role)
  GCP   INFERCRANE_QUALIFY_GCP_PROJECT, INFERCRANE_QUALIFY_GCP_ZONE,
        INFERCRANE_QUALIFY_GCP_SNAPSHOT (a name in the project, or projects/P/global/snapshots|images/N)
        optional INFERCRANE_QUALIFY_GCP_DISK_TYPE (default pd-balanced)
        credentials: Application Default Credentials, or a workload identity federation config
        in INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG (inline JSON or a path)
        INFERCRANE_QUALIFY_GCP_ENDPOINT points the clients at an emulator instead (tests only)
  Kubernetes INFERCRANE_QUALIFY_KUBECONFIG (a kubeconfig file), INFERCRANE_QUALIFY_K8S_NAMESPACE
        (default `default`), INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT (in that namespace)
        optional INFERCRANE_QUALIFY_K8S_CONTEXT, INFERCRANE_QUALIFY_K8S_STORAGE_CLASS (use an
        `Immediate` class: a WaitForFirstConsumer claim stays Pending with no pod)
  INFERCRANE_QUALIFY_REPEATS         prefetch repetitions per provider (default 5)
  INFERCRANE_QUALIFY_WAIT_S / _POLL_S  give up on one prefetch after / poll every (900 / 5 s)
  INFERCRANE_QUALIFY_JOURNAL         resource journal (default .qualify/provider-resources.json)

Every resource is made by the adapter for a prefetch of tenant `qualify-<run id>-<n>`, so it
carries that prefetch's key (EC2 tag `infercrane:prefetch-key` plus the request id
`qualify-<run id>-<n>` in `infercrane:request-id`; GCE label `infercrane-prefetch-key`;
Kubernetes label `infercrane.dev/prefetch-key`), and is written to the journal as soon as it
exists. Each run first lists what it would create and what earlier runs left (the dry run; it
stops there with --dry-run), removes those leftovers the rules confirm are the qualification's,
deletes what it created, and checks the adapter finds none of it any more.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercrane.qualify.core import PromiseResult
from infercrane.qualify.providers.journal import Journal
from infercrane.qualify.providers.scenario import Scenario, _stderr, quantile, read_only_violations
from infercrane.qualify.providers.targets import (
    DEFAULT_JOURNAL,
    NEEDS,
    PROVIDERS,
    TENANT_PREFIX,
    ProviderTarget,
    _number,
    build,
    configured,
    missing_credentials,
)

__all__ = ["DEFAULT_JOURNAL", "NEEDS", "PROVIDERS", "TENANT_PREFIX", "Journal", "ProviderRun",
           "ProviderTarget", "Scenario", "build", "configured", "missing_credentials", "quantile",
           "read_only_violations", "run"]


@dataclass(frozen=True)
class ProviderRun:
    """What a provider run found: its results and the evidence document written for them."""

    results: list[PromiseResult]
    doc: dict[str, Any]
    path: Path
    commit: str


def run(evidence_path: Path | None, dry_run: bool = False, env: Mapping[str, str] | None = None,
        echo: Callable[[str], None] = _stderr) -> ProviderRun | None:
    """Run every configured provider and write the evidence; None when none is configured
    (`NEEDS` says what to set). Presenting the result is the CLI's (`cli/qualify.py`)."""
    from infercrane.clock import rfc3339, utcnow
    from infercrane.qualify.core import guarded
    from infercrane.qualify.evidence import evidence_document, git_commit, write

    env = os.environ if env is None else env
    targets = configured(env)
    for name in list(targets):
        needs = missing_credentials(targets[name])
        if needs:
            echo(f"{name} provider skipped: needs {needs}")
            targets.pop(name)
    if not targets:
        return None
    journal = Journal(Path(env.get("INFERCRANE_QUALIFY_JOURNAL") or DEFAULT_JOURNAL))
    wait_s = _number(env, "INFERCRANE_QUALIFY_WAIT_S", 900.0)
    poll_s = _number(env, "INFERCRANE_QUALIFY_POLL_S", 5.0)
    started = rfc3339(utcnow())
    results: list[PromiseResult] = []
    for name in PROVIDERS:
        if name in targets:
            pt = targets[name]

            def one(pt: ProviderTarget = pt) -> PromiseResult:
                adapter, rules = build(pt)
                return Scenario(adapter, rules, journal, wait_s=wait_s, poll_s=poll_s,
                                cleanup_wait_s=wait_s, echo=echo).run(pt, dry_run=dry_run)

            results.append(guarded(f"{name} cache and capacity", one))
    commit = git_commit()
    doc = evidence_document(results, "provider-qualification",
                            {"started_at": started, "finished_at": rfc3339(utcnow())}, commit)
    path = evidence_path or Path(".qualify") / f"provider-qualification-{commit[:12]}.json"
    write(doc, path)
    return ProviderRun(results, doc, path, commit)
