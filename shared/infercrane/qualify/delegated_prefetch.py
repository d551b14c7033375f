"""Delegated prefetch semantics, on the AWS adapter over the stack's EC2 (moto):
- duplicates: concurrent identical requests -> one request (one 202, the rest 200 with the same
  id), one dispatch, one provider volume;
- crash between persist and send: a request persisted by a process that dies before sending is
  found by the sweeper and executed exactly once;
- redelivery: duplicate messages on the dispatch and adapter queues create no second volume and
  no second dispatch.
Faults come only from this side: a child process killed (SIGKILL) right after it persisted a
request, messages sent again to the queues through moto."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from infercrane.qualify.common import missing_routes, queue_url, table_name, wait_for
from infercrane.qualify.core import PromiseResult
from infercrane.qualify.target import Reply, Target, is_dead_letter_queue

PROMISE = "delegated prefetch"
ZONE = "us-east-1a"
CONCURRENT = 20
PREFETCH_KEY_TAG = "infercrane:prefetch-key"


class KilledOnSend:
    """A transport that kills its own process (SIGKILL) at the moment it would send: the process
    dies between persisting the request and sending its message. The fault is the suite's."""

    def send(self, body: dict[str, Any]) -> str:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


def snapshot_for(target: Target, model: str) -> str:
    """A completed, encrypted snapshot binding `model` in its description (moto EC2)."""
    ec2 = target.aws("ec2")
    vol = ec2.create_volume(AvailabilityZone=ZONE, Size=1, Encrypted=True)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol, Description=f"qualification infercrane-model={model}")
    ec2.delete_volume(VolumeId=vol)
    return str(snap["SnapshotId"])


def volumes_for(target: Target, request_id: str | None, model: str) -> int:
    """Provider volumes made for a model (by the prefetch key tag, or the model tag)."""
    ec2 = target.aws("ec2")
    vols = ec2.describe_volumes().get("Volumes", [])
    n = 0
    for v in vols:
        tags = {t["Key"]: t["Value"] for t in v.get("Tags") or []}
        if model in tags.values() or (request_id and any(request_id in t for t in tags.values())):
            n += 1
    return n


def status(target: Target, request_id: str) -> dict[str, Any]:
    r = target.request("GET", f"/v1/prefetch-requests/{request_id}", tenant="demo")
    return r.doc if r.status == 200 and isinstance(r.doc, dict) else {}


def ended(doc: Mapping[str, Any]) -> bool:
    return doc.get("status") in ("completed", "failed")


def check_duplicates(replies: list[Reply], result: PromiseResult,
                     is_ended: Callable[[str], bool] = lambda _id: False) -> str | None:
    """Of concurrent identical requests exactly one creates each attempt (202, the rest 200 with
    its id), and a later attempt exists only because the one before it had ended (docs/cache.md):
    local execution environments serve the burst in waves, and a fast adapter may complete
    attempt 1 before the last wave arrives. Returns the latest attempt's id."""
    ids = {(r.doc or {}).get("id") for r in replies if isinstance(r.doc, dict)}
    named = sorted((i for i in ids if isinstance(i, str)), key=_attempt)
    keys = {i.rsplit("_", 1)[0] for i in named}
    latest = named[-1] if named else None
    one_key = None not in ids and len(keys) == 1
    result.check(f"{len(replies)} concurrent identical requests → one active request",
                 one_key and all(i == latest or is_ended(i) for i in named),
                 f"{len(ids)} ids" + ("" if len(ids) == 1 else ", earlier ones must have ended"))
    created = Counter((r.doc or {}).get("id") for r in replies if r.status == 202)
    result.check(f"{len(replies)} concurrent identical requests → one 202 per attempt, others 200",
                 one_key and all(r.status in (200, 202) for r in replies)
                 and all(created[i] == 1 for i in named) and sum(created.values()) == len(named),
                 str(sorted(r.status for r in replies)))
    return latest if one_key else None


def _attempt(request_id: str) -> int:
    tail = request_id.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def check_executed_once(doc: Mapping[str, Any], volumes: int, label: str,
                        result: PromiseResult) -> None:
    result.check(f"{label}: request completed", doc.get("status") == "completed",
                 f"{doc.get('status')} {doc.get('failure_reason')}")
    result.check(f"{label}: dispatched once", doc.get("dispatch_count") == 1,
                 str(doc.get("dispatch_count")))
    result.check(f"{label}: one provider volume", volumes == 1, str(volumes))


def crash_worker_main(argv: Sequence[str]) -> None:  # pragma: no cover - a child process
    """Persist one prefetch request, then die before sending it. Its clock stands past the
    dispatch deadline so the sweeper's next run treats the request as stuck."""
    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.cache import DynamoCacheStore
    from infercrane.clock import utcnow
    from infercrane.domain.prefetch import ACCEPTED_DEADLINE_S, PrefetchService

    args = json.loads(argv[0])
    store = DynamoCacheStore(args["table"], DynamoConfig(region="us-east-1", host=args["aws"]))
    service = PrefetchService(store, KilledOnSend(), {},
                              lambda: utcnow() - timedelta(seconds=ACCEPTED_DEADLINE_S + 60))
    service.request(args["tenant"], args["model"], "aws", ZONE, args["source"])


def persist_then_die(target: Target, model: str, source: str,
                     tenant: str = "demo") -> tuple[int, str]:
    """Run the persist-then-die child; (its exit status, the id its request must have)."""
    from infercrane.domain.prefetch import key_hash, request_id

    env = {**os.environ, **target.aws_env()}
    payload = json.dumps({"aws": target.aws_endpoint, "table": table_name(target, "CacheTable"),
                          "tenant": tenant, "model": model, "source": source})
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", "import sys; from infercrane.qualify.delegated_prefetch import "
         "crash_worker_main; crash_worker_main(sys.argv[1:])", payload],
        capture_output=True, text=True, timeout=120, check=False, env=env)
    return done.returncode, request_id(key_hash(tenant, model, "aws", ZONE), 1)


def run(target: Target) -> PromiseResult:
    result = PromiseResult(PROMISE)
    missing = missing_routes(target, [("GET", f"/v1/prefetch-requests/pf_{'0' * 32}_1")])
    if missing:
        return result.not_available(", ".join(missing))
    token = secrets.token_hex(8)
    model_a = "sha256:" + hashlib.sha256(f"qualify-a-{token}".encode()).hexdigest()
    model_b = "sha256:" + hashlib.sha256(f"qualify-b-{token}".encode()).hexdigest()
    snap_a, snap_b = snapshot_for(target, model_a), snapshot_for(target, model_b)
    body = {"model": model_a, "adapter": "aws", "location": ZONE, "source": snap_a}

    # 1. Duplicates.
    with ThreadPoolExecutor(CONCURRENT) as pool:
        replies = list(pool.map(lambda _: target.request("POST", "/v1/prefetch-requests",
                                                         tenant="demo", body=body),
                                range(CONCURRENT)))
    rid = check_duplicates(replies, result, lambda i: ended(status(target, i)))
    if rid is None:
        return result
    target.settle()
    wait_for(lambda: status(target, rid), ended, timeout_s=60)
    target.settle()
    check_executed_once(status(target, rid), volumes_for(target, rid, model_a), "duplicates", result)
    cache = target.request("GET", f"/v1/cache/{model_a}", tenant="demo").doc or {}
    states = {o.get("location"): o.get("state") for o in cache.get("observations", [])}
    result.check("duplicates: the cache reads present where the adapter prefetched",
                 states.get(ZONE) == "present", str(states))

    # 2. Redelivery: the dispatch message and the adapter message, each delivered again twice.
    from infercrane.domain.prefetch import PrefetchRequest, adapter_message  # the queue contract

    sqs = target.aws("sqs")
    req = PrefetchRequest(rid, "demo", model_a, "aws", ZONE, snap_a, "dispatched", 1, None, {},
                          _now(), _now())
    for _ in range(2):
        sqs.send_message(QueueUrl=queue_url(target, "PrefetchQueue"),
                         MessageBody=json.dumps({"tenant": "demo", "request_id": rid}))
        sqs.send_message(QueueUrl=queue_url(target, "AdapterAwsQueue"),
                         MessageBody=json.dumps(adapter_message(req, "prefetch")))
    result.check("redelivery: the queues drained", target.settle())
    check_executed_once(status(target, rid), volumes_for(target, rid, model_a), "redelivery", result)
    result.check("redelivery: nothing went to a DLQ", _dlq_depth(target) == 0, str(_dlq_depth(target)))

    # 3. Crash between persist and send, recovered by the sweeper.
    code, crashed = persist_then_die(target, model_b, snap_b)
    result.check("crash: the process was killed between persist and send",
                 code == -signal.SIGKILL, f"exit {code}")
    target.settle()
    before = status(target, crashed)
    result.check("crash: persisted request readable, nothing sent",
                 before.get("status") == "accepted" and volumes_for(target, crashed, model_b) == 0,
                 str(before.get("status")))
    tick = target.tick("cache_sweep")
    swept = ((tick.doc or {}).get("result") or {}) if isinstance(tick.doc, dict) else {}
    result.check("crash: the sweeper re-sent the stuck request",
                 tick.status == 200 and int(swept.get("requests_redispatched", 0)) >= 1, str(swept))
    wait_for(lambda: status(target, crashed), ended, timeout_s=60)
    target.settle()
    target.tick("cache_sweep")  # a second sweep must not send it again
    target.settle()
    check_executed_once(status(target, crashed), volumes_for(target, crashed, model_b),
                        "crash recovery", result)
    result.tried = (f"{CONCURRENT} concurrent duplicates; 2x redelivery on the dispatch and adapter "
                    "queues; a process killed (SIGKILL) between persist and send, then 2 sweeps "
                    "(AWS adapter on moto EC2)")
    result.facts = {"concurrent": CONCURRENT, "adapter": "aws"}
    return result


def _now() -> Any:
    from infercrane.clock import utcnow

    return utcnow()


def _dlq_depth(target: Target) -> int:
    sqs = target.aws("sqs")
    total = 0
    for name, url in target.queue_urls().items():
        if is_dead_letter_queue(name) and "Capture" not in name:
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
                "ApproximateNumberOfMessages"])["Attributes"]
            total += int(attrs.get("ApproximateNumberOfMessages", 0))
    return total
