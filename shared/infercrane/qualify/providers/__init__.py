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

import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercrane.domain.classifier import classify
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import ProviderCallFailed
from infercrane.errors import DependencyUnavailable
from infercrane.ports.providers import ProviderAdapter, ProviderRules
from infercrane.qualify.core import PromiseResult

PROVIDERS = ("aws", "gcp", "kubernetes")
TENANT_PREFIX = "qualify-"
DEFAULT_JOURNAL = Path(".qualify") / "provider-resources.json"
NEEDS = ("provider qualification skipped: needs credentials and a target — set INFERCRANE_QUALIFY_MODEL "
         "plus AWS (INFERCRANE_QUALIFY_AWS_SNAPSHOT, INFERCRANE_QUALIFY_AWS_AZ, AWS credentials), GCP "
         "(INFERCRANE_QUALIFY_GCP_PROJECT/_ZONE/_SNAPSHOT, ADC or _GCP_CREDENTIALS_CONFIG) or Kubernetes "
         "(INFERCRANE_QUALIFY_KUBECONFIG/_K8S_NAMESPACE/_K8S_VOLUMESNAPSHOT); see docs/qualification.md")


@dataclass(frozen=True)
class ProviderTarget:
    """What one provider's scenario prefetches: `source` into `location` (the adapter message's
    fields), `repeats` times. `options` holds the provider's client settings."""

    provider: str
    model: str
    location: str
    source: str
    repeats: int
    options: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def region(self) -> str:
        return self.location[:-1]

    def targets(self, run_id: str) -> list[Target]:
        # One tenant per repetition: each gets its own prefetch key, so no repetition can find
        # (or be deduplicated into, via ClientToken/requestId) another one's resource.
        return [Target.of(f"{TENANT_PREFIX}{run_id}-{i}", f"{TENANT_PREFIX}{run_id}-{i}",
                          self.model, self.provider, self.location, self.source)
                for i in range(self.repeats)]


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name) or default)
    except ValueError:
        return default


def configured(env: Mapping[str, str]) -> dict[str, ProviderTarget]:
    """The providers whose target is fully configured (credentials are checked separately)."""
    model = env.get("INFERCRANE_QUALIFY_MODEL", "")
    if not model:
        return {}
    repeats = max(1, int(_number(env, "INFERCRANE_QUALIFY_REPEATS", 5)))
    opt = {k: env[k] for k in env if k.startswith("INFERCRANE_QUALIFY_") and env[k]}
    out: dict[str, ProviderTarget] = {}
    if env.get("INFERCRANE_QUALIFY_AWS_SNAPSHOT") and env.get("INFERCRANE_QUALIFY_AWS_AZ"):
        out["aws"] = ProviderTarget("aws", model, env["INFERCRANE_QUALIFY_AWS_AZ"],
                                    env["INFERCRANE_QUALIFY_AWS_SNAPSHOT"], repeats, opt)
    if all(env.get(f"INFERCRANE_QUALIFY_GCP_{k}") for k in ("PROJECT", "ZONE", "SNAPSHOT")):
        project, snap = env["INFERCRANE_QUALIFY_GCP_PROJECT"], env["INFERCRANE_QUALIFY_GCP_SNAPSHOT"]
        source = snap if snap.startswith("projects/") else f"projects/{project}/global/snapshots/{snap}"
        out["gcp"] = ProviderTarget("gcp", model, env["INFERCRANE_QUALIFY_GCP_ZONE"], source,
                                    repeats, opt)
    if env.get("INFERCRANE_QUALIFY_KUBECONFIG") and env.get("INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT"):
        cluster = env.get("INFERCRANE_QUALIFY_K8S_CONTEXT") or "current"
        namespace = env.get("INFERCRANE_QUALIFY_K8S_NAMESPACE") or "default"
        out["kubernetes"] = ProviderTarget("kubernetes", model, f"{cluster}/{namespace}",
                                           env["INFERCRANE_QUALIFY_K8S_VOLUMESNAPSHOT"], repeats, opt)
    return out


def missing_credentials(t: ProviderTarget) -> str | None:
    """What the provider still needs before it can run, or None."""
    o = t.options
    if t.provider == "aws":
        try:
            import boto3

            if boto3.session.Session().get_credentials() is not None:
                return None
        except Exception:  # noqa: S110 - any failure means: no usable credentials
            pass
        return "AWS credentials (the standard AWS chain)"
    if t.provider == "gcp":
        if o.get("INFERCRANE_QUALIFY_GCP_ENDPOINT") or o.get("INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG"):
            return None
        try:
            import google.auth

            google.auth.default()
            return None
        except Exception:
            return "Application Default Credentials or INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG"
    if not Path(o.get("INFERCRANE_QUALIFY_KUBECONFIG", "")).is_file():
        return "a readable kubeconfig file in INFERCRANE_QUALIFY_KUBECONFIG"
    return None


def build(t: ProviderTarget) -> tuple[Any, Any]:
    """The production adapter and rules for `t`, made with the same constructors and arguments
    `infercrane.bootstrap.Container.<provider>_adapter` uses; only the client/credential source
    differs (a local AWS profile, ADC, a kubeconfig file instead of the stack's settings)."""
    o = t.options
    if t.provider == "aws":
        import boto3

        from infercrane.adapters.ec2 import Ec2Adapter
        from infercrane.domain.providers.aws import AwsRules

        kms = o.get("INFERCRANE_QUALIFY_AWS_KMS_KEY_ID")
        client = boto3.session.Session(region_name=t.region).client("ec2")
        return (Ec2Adapter(client, kms_key_id=kms),
                AwsRules(kms, o.get("INFERCRANE_QUALIFY_AWS_SNAPSHOT_OWNER")))
    if t.provider == "gcp":
        from infercrane.adapters.gce import GceAdapter, disks_clients, workload_identity_credentials
        from infercrane.domain.providers.gcp import GcpRules

        endpoint = o.get("INFERCRANE_QUALIFY_GCP_ENDPOINT")
        config = o.get("INFERCRANE_QUALIFY_GCP_CREDENTIALS_CONFIG")
        creds = workload_identity_credentials(config) if config and not endpoint else None
        disks, snapshots, images = disks_clients(endpoint, creds)
        return (GceAdapter(disks, snapshots, images, o["INFERCRANE_QUALIFY_GCP_PROJECT"],
                           o.get("INFERCRANE_QUALIFY_GCP_DISK_TYPE") or "pd-balanced"),
                GcpRules())
    from infercrane.adapters.kubernetes_pvc import KubernetesPvcAdapter
    from infercrane.domain.providers.kubernetes import KubernetesRules

    kubeconfig = o["INFERCRANE_QUALIFY_KUBECONFIG"]
    context = o.get("INFERCRANE_QUALIFY_K8S_CONTEXT")
    clients: dict[str, Any] = {}

    def client_for(cluster: str) -> Any:
        # The location's cluster part names the kubeconfig context; one ApiClient per run.
        if cluster not in clients:
            from kubernetes import config as k8s_config

            clients[cluster] = k8s_config.new_client_from_config(config_file=kubeconfig,
                                                                 context=context)
        return clients[cluster]

    return (KubernetesPvcAdapter(client_for,
                                 storage_class=o.get("INFERCRANE_QUALIFY_K8S_STORAGE_CLASS")),
            KubernetesRules())


# -- the journal: every resource made, until it is confirmed gone -------------------------------
class Journal:
    """Resources qualification runs created and have not yet seen gone, in a JSON file (None:
    memory only). Written the moment a resource exists, so a crashed run's leftovers are
    listed and removed by the next one."""

    def __init__(self, path: Path | None):
        self.path = path
        self._entries: list[dict[str, str]] = []
        if path is not None and path.is_file():
            self._entries = list(json.loads(path.read_text()).get("resources", []))

    def entries(self, provider: str, *, other_than: str | None = None) -> list[dict[str, str]]:
        return [e for e in self._entries if e["provider"] == provider and e["run"] != other_than]

    def add(self, run_id: str, t: Target, resource_id: str) -> None:
        self._entries.append({"run": run_id, "provider": t.adapter, "tenant": t.tenant,
                              "request_id": t.request_id, "model": t.model,
                              "location": t.location, "source": t.source,
                              "resource_id": resource_id})
        self._save()

    def remove(self, provider: str, resource_id: str) -> None:
        self._entries = [e for e in self._entries
                         if (e["provider"], e["resource_id"]) != (provider, resource_id)]
        self._save()

    @staticmethod
    def target(e: Mapping[str, str]) -> Target:
        return Target.of(e["tenant"], e["request_id"], e["model"], e["provider"], e["location"],
                         e["source"])

    def _save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"resources": self._entries}, indent=1))


def quantile(values: list[float], q: float) -> float | None:
    """Lower nearest rank (the capacity report's exact method)."""
    if not values:
        return None
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def read_only_violations(plan: Mapping[str, Any], provider: str) -> list[str]:
    """Where an attach/mount plan would let the model be written: it must say `read_only` at
    the top, name its provider, and nowhere inside ask for a writable mode."""
    bad: list[str] = []
    if plan.get("read_only") is not True:
        bad.append("read_only")
    if plan.get("provider") != provider:
        bad.append("provider")

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                here = f"{path}.{k}" if path else str(k)
                writable = ((k in ("readOnly", "read_only") and v is not True)
                            or (k == "mode" and v != "READ_ONLY")
                            or (k == "options" and isinstance(v, list) and "ro" not in v))
                if writable:
                    bad.append(here)
                walk(v, here)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(plan, "")
    return bad


# -- the scenario --------------------------------------------------------------------------------
def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Scenario:
    """One provider's run, through the port only. `clock`/`sleep` are injectable for tests."""

    adapter: ProviderAdapter
    rules: ProviderRules
    journal: Journal
    wait_s: float = 900.0
    poll_s: float = 5.0
    cleanup_wait_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    echo: Callable[[str], None] = _stderr
    outcomes: dict[str, int] = field(default_factory=dict)
    codes: dict[str, dict[str, int]] = field(default_factory=dict)

    def _count(self, outcome: str, code: str | None = None) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if code is not None:
            by_code = self.codes.setdefault(outcome, {})
            by_code[code] = by_code.get(code, 0) + 1

    @contextlib.contextmanager
    def _provider_calls(self) -> Iterator[None]:
        """Count a failed provider call under its capacity class instead of stopping the run."""
        try:
            yield
        except ProviderCallFailed as exc:
            cls = classify(exc.provider, exc.provider_code, exc.provider_message)
            self._count(cls.failure_class, exc.provider_code or "unknown")
        except DependencyUnavailable:
            # The adapters raise this for 5xx/429/network: retryable API noise.
            self._count("transient", "unavailable")

    def leftovers(self, provider: str, run_id: str) -> list[tuple[Target, str, bool]]:
        """Journaled resources of earlier runs the adapter still sees: (target, id, owned)."""
        found: list[tuple[Target, str, bool]] = []
        for e in self.journal.entries(provider, other_than=run_id):
            t = Journal.target(e)
            resource = self.adapter.describe(t, e["resource_id"])
            if resource is None or self.adapter.find(t) is None:
                self.journal.remove(provider, e["resource_id"])  # gone (or being deleted)
                continue
            found.append((t, e["resource_id"], self.rules.owned(resource, t)))
        return found

    def run(self, pt: ProviderTarget, *, dry_run: bool, run_id: str | None = None) -> PromiseResult:
        run_id = run_id or "q" + secrets.token_hex(5)
        result = PromiseResult(f"{pt.provider} cache and capacity")
        planned = pt.targets(run_id)
        old = self.leftovers(pt.provider, run_id)
        self.echo(f"{pt.provider} dry run: would create {len(planned)} resource(s) "
                  f"{', '.join(t.name for t in planned)} from {pt.source} in {pt.location} "
                  f"(tenants {TENANT_PREFIX}{run_id}-0..{len(planned) - 1}); leftovers of earlier "
                  f"runs: {', '.join(rid for _, rid, _ in old) or 'none'}")
        result.check("dry run listed planned and leftover resources", True)
        if dry_run:
            result.tried = "dry run only"
            result.facts = {"planned": len(planned), "leftovers": len(old), "location": pt.location}
            return result

        for t, rid, owned in old:
            if owned:
                self._delete(t, rid)
        left = [rid for t, rid, _ in old if self.adapter.find(t) is not None]
        result.check("leftovers of earlier runs removed (those the rules call ours)", not left,
                     ", ".join(left))

        source: dict[str, Any] | None = None
        verdict_ok, reason = False, "provider call failed"
        with self._provider_calls():
            source = self.adapter.describe_source(planned[0])
            verdict = self.rules.check_source(source, planned[0])
            verdict_ok, reason = verdict.status == "ok", verdict.reason or verdict.status
        result.check("source verified by the provider rules", verdict_ok and source is not None,
                     reason)
        if source is None or not verdict_ok:
            result.tried = f"source {pt.source} not usable"
            result.facts = self._facts(pt, [])
            return result

        timings: list[float] = []
        plans_bad: list[str] = []
        created: list[tuple[Target, str]] = []
        not_ours: list[str] = []
        for t in planned:
            made = self._prefetch(t, source, run_id, timings, plans_bad)
            if made is not None:
                created.append((t, made))
                if not self._delete(t, made):
                    not_ours.append(made)

        result.check("at least one prefetch reached present", bool(timings),
                     json.dumps(self.outcomes, sort_keys=True))
        result.check("every present resource has a read-only attach/mount plan", not plans_bad,
                     "; ".join(plans_bad))
        result.check("the rules recognise every created resource as this prefetch's",
                     not not_ours, ", ".join(not_ours))
        left = [rid for t, rid in created if self.adapter.find(t) is not None]
        result.check("nothing the run created is left", not left, ", ".join(left))
        result.tried = f"{pt.repeats} prefetches of {pt.source} into {pt.location}"
        result.facts = self._facts(pt, timings)
        return result

    def _prefetch(self, t: Target, source: dict[str, Any], run_id: str, timings: list[float],
                  plans_bad: list[str]) -> str | None:
        """find-or-create, then describe+assess until present, terminal or timeout. Returns the
        id of the resource (to delete), if one exists."""
        rid: str | None = None
        t0 = self.clock()
        with self._provider_calls():
            resource = self.adapter.find(t)
            while resource is None:
                # None: the provider is preparing the source first (AWS: FSR being enabled).
                resource = self.adapter.create(t, source)
                if resource is None:
                    if self.clock() - t0 >= self.wait_s:
                        self._count("timeout", "source still being prepared")
                        return None
                    self.sleep(self.poll_s)
            rid = self.rules.resource_id(resource)
            self.journal.add(run_id, t, rid)
            while True:
                a = self.rules.assess(resource, t, self.adapter.facts(t, resource))
                if a.state == "present":
                    timings.append(round(self.clock() - t0, 3))
                    self._count("present")
                    bad = read_only_violations(self.rules.plan(resource, t), t.adapter)
                    if bad:
                        plans_bad.append(f"{rid}: {', '.join(bad)}")
                    break
                if a.state in ("failed", "missing"):
                    # `failed` is a verification failure (the contract broke), never capacity.
                    self._count("verification_failed" if a.state == "failed" else "missing")
                    break
                if self.clock() - t0 >= self.wait_s:
                    self._count("timeout", "still prefetching")
                    break
                self.sleep(self.poll_s)
                described = self.adapter.describe(t, rid)
                if described is None:
                    self._count("missing")
                    break
                resource = described
        return rid

    def _delete(self, t: Target, rid: str) -> bool:
        """Delete `rid` if the rules say it is `t`'s, then wait until the adapter no longer finds
        it. False when the resource is not ours (it is left alone)."""
        with self._provider_calls():
            resource = self.adapter.describe(t, rid)
            if resource is None:
                self.journal.remove(t.adapter, rid)
                return True
            if not self.rules.owned(resource, t):
                return False
            self.adapter.delete(t, rid)
            deadline = self.clock() + self.cleanup_wait_s
            while self.adapter.find(t) is not None and self.clock() < deadline:
                self.sleep(self.poll_s)
            if self.adapter.find(t) is None:
                self.journal.remove(t.adapter, rid)
        return True

    def _facts(self, pt: ProviderTarget, timings: list[float]) -> dict[str, Any]:
        return {"prefetch_to_present_s": {"n": len(timings), "p50": quantile(timings, 0.5),
                                          "p95": quantile(timings, 0.95), "values": timings},
                "outcomes": dict(sorted(self.outcomes.items())),
                "codes": {k: dict(sorted(v.items())) for k, v in sorted(self.codes.items())},
                "location": pt.location, "repeats": pt.repeats}


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
