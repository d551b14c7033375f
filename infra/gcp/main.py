"""Google Cloud Function (2nd gen, functions-framework, CloudEvent from Pub/Sub): the GCP provider
adapter deployed inside Google Cloud, from the same `infercrane` code as the `adapter_gcp` Lambda.

It runs with the function's own service account (Application Default Credentials, no key file)
and reports observations back through the InferCrane API with one tenant's API key
(`INFERCRANE_ENDPOINT`, `INFERCRANE_API_KEY` from Secret Manager, `INFERCRANE_TENANT`).

Re-checks: a disk still `CREATING`/`RESTORING` raises `RecheckLater`, so Pub/Sub redelivers the
message with the subscription's retry policy (exponential back-off) until it is `READY`, and a
dead-letter topic ends a message after its maximum delivery attempts (see README.md).
"""

from __future__ import annotations

import base64
import os
from functools import lru_cache
from typing import Any

import functions_framework

from infercrane.adapters.api_reporter import ApiCacheReporter, ApiPrefetchRequests
from infercrane.adapters.gce import GceAdapter, disks_clients
from infercrane.clock import utcnow
from infercrane.domain.classifier import classify
from infercrane.domain.providers.gcp import GcpRules
from infercrane.domain.providers.runner import AdapterRunner


class RecheckLater(Exception):
    """Still prefetching: failing the delivery makes Pub/Sub redeliver it later."""


@lru_cache(maxsize=1)
def runner() -> AdapterRunner:
    env = os.environ
    endpoint, key, tenant = env["INFERCRANE_ENDPOINT"], env["INFERCRANE_API_KEY"], \
        env["INFERCRANE_TENANT"]
    clients = disks_clients(env.get("INFERCRANE_GCP_COMPUTE_ENDPOINT") or None)
    gce = GceAdapter(*clients, project=env["INFERCRANE_GCP_PROJECT"],
                     disk_type=env.get("INFERCRANE_GCP_DISK_TYPE", "pd-balanced"))
    return AdapterRunner(gce, GcpRules(), ApiPrefetchRequests(endpoint, key, tenant),
                         ApiCacheReporter(endpoint, key, tenant), classify, utcnow)


@functions_framework.cloud_event
def prefetch(cloud_event: Any) -> None:
    message = (cloud_event.data or {}).get("message") or {}
    # Bad base64 or not UTF-8 is just an invalid message (consumed by the runner), not an
    # exception that Pub/Sub would redeliver into the dead-letter topic.
    try:
        body = base64.b64decode(message.get("data") or b"").decode("utf-8", "replace")
    except ValueError:  # binascii.Error
        body = ""
    outcome = runner().handle(body)
    if outcome.state == "prefetching":
        raise RecheckLater(outcome.reason or "still prefetching")
