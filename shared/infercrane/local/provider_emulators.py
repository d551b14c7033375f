"""Local-only: start the GCE and Kubernetes EMULATORS (tests/emulators/) with the local stack, so
`make demo`, e2e tests and qualification run the GCP and Kubernetes adapters through their real
client libraries. Registered in `infercrane.local.stack.EXTENSIONS` by `register()`; each starter
does nothing when a real endpoint is configured. AWS needs nothing here: moto serves EC2.

The emulators live in the repository's tests/ (they never ship in the Lambda layer), so this
works from a checkout (editable install), which is how the local stack runs.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infercrane.local.stack import LocalStack

LOCAL_PROJECT = "infercrane-local"
LOCAL_CLUSTER = "local"
RUNNING: dict[str, Any] = {}


def _module(stack: LocalStack, name: str) -> Any:
    # The checkout holding tests/emulators: the template's folder or one above it (a test's copy).
    here = stack.template_path.resolve().parent
    root = str(next((f for f in (here, *here.parents) if (f / "tests" / "emulators").is_dir()), here))
    if root not in sys.path:
        sys.path.append(root)
    return importlib.import_module(f"tests.emulators.{name}")


def start_gce(stack: LocalStack) -> dict[str, str]:
    if os.environ.get("INFERCRANE_GCP_COMPUTE_ENDPOINT") or os.environ.get("INFERCRANE_GCP_PROJECT"):
        return {}  # a real (or already running) Compute Engine is configured
    emulator = _module(stack, "gce").GceEmulator(ready_after_s=1.0)
    emulator.start(stack.host)
    RUNNING["gce"] = emulator
    return {"INFERCRANE_GCP_COMPUTE_ENDPOINT": emulator.endpoint,
            "INFERCRANE_GCP_PROJECT": LOCAL_PROJECT, "INFERCRANE_ADAPTER_RECHECK_DELAY_S": "1"}


def start_kubernetes(stack: LocalStack) -> dict[str, str]:
    if os.environ.get("INFERCRANE_KUBERNETES_ENDPOINT"):
        return {}
    emulator = _module(stack, "kubernetes").KubernetesEmulator(bind_after_s=1.0)
    emulator.start(stack.host)
    RUNNING["kubernetes"] = emulator
    return {"INFERCRANE_KUBERNETES_ENDPOINT": emulator.endpoint,
            "INFERCRANE_ADAPTER_RECHECK_DELAY_S": "1"}


def register() -> None:
    from infercrane.local.stack import EXTENSIONS

    EXTENSIONS.setdefault("gce-emulator", start_gce)
    EXTENSIONS.setdefault("kubernetes-emulator", start_kubernetes)


def seed_demo_artifacts(model: str, aws_endpoint: str,
                        namespace: str = "models") -> dict[str, dict[str, str]]:
    """Provider-native artifacts bound to `model` for a demo: an encrypted EBS snapshot in moto,
    a GCE snapshot and a Kubernetes VolumeSnapshot in the emulators. Returns, per adapter, the
    `location` and `source` to pass to `infercrane prefetch request`."""
    import boto3

    from infercrane.domain.providers.kubernetes import DIGEST_ANNOTATION
    from infercrane.domain.providers.model import binding

    out: dict[str, dict[str, str]] = {}
    ec2 = boto3.client("ec2", endpoint_url=aws_endpoint, region_name="us-east-1")
    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1, Encrypted=True)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol, Description=f"model weights {binding(model)}")
    out["aws"] = {"location": "us-east-1a", "source": snap["SnapshotId"]}
    name = f"weights-{model.split(':', 1)[1][:12]}"
    if "gce" in RUNNING:
        RUNNING["gce"].add_snapshot(LOCAL_PROJECT, name, f"model weights {binding(model)}")
        out["gcp"] = {"location": "us-central1-a",
                      "source": f"projects/{LOCAL_PROJECT}/global/snapshots/{name}"}
    if "kubernetes" in RUNNING:
        RUNNING["kubernetes"].add_volume_snapshot(namespace, name, {DIGEST_ANNOTATION: model})
        out["kubernetes"] = {"location": f"{LOCAL_CLUSTER}/{namespace}", "source": name}
    return out


DEMO_MODEL = "sha256:" + "d3" * 32


def demo_prefetch(demo: Any) -> None:
    """A `make demo` step (`infercrane.local.demo.STEPS`): one prefetch per adapter end to end,
    through the CLI, then a release. Needs `register()` before the stack starts."""
    import json
    import time

    import click

    click.echo()
    click.secho("== Prefetch: provider-native artifacts bound to one model digest, verified, "
                "prefetched and planned read-only", bold=True)
    sources = seed_demo_artifacts(DEMO_MODEL, demo.stack.aws_endpoint)
    click.echo("Seeded (moto EC2; GCE and Kubernetes emulators): " + json.dumps(sources))
    ids = {}
    for adapter, s in sources.items():
        out = demo.run("prefetch", "request", "--model", DEMO_MODEL, "--adapter", adapter,
                       "--location", s["location"], "--source", s["source"], "--output", "json",
                       show=False)
        ids[adapter] = json.loads(out)["id"]
    # Re-checks are delayed queue messages, so poll the effective state rather than drain.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = json.loads(demo.run("cache", "status", "--model", DEMO_MODEL, "--output", "json",
                                  show=False))
        if sum(o["state"] == "present" for o in doc["observations"]) >= len(sources):
            break
        time.sleep(1)
    demo.run("cache", "status", "--model", DEMO_MODEL)
    for adapter in sources:
        demo.run("prefetch", "status", ids[adapter])
    click.echo("Release removes only what the adapters created and tagged:")
    for adapter in sources:
        demo.run("prefetch", "release", ids[adapter], show=False)
