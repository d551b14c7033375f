"""One tenant cannot hurt another: the scheduled sweeper and aggregator isolate a poisoned item.

The poisons are written straight to the tables, as a bug or an older release could have left
them (a cache observation dated 0001-01-01, an attempt whose stored fields do not parse); every
other tenant's work must still be done in the same run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.domain.cache import CacheObservation
from infercrane.domain.prefetch import PrefetchService
from infercrane.errors import DependencyUnavailable
from tests.conftest import REPO
from tests.support.lambda_context import LambdaContext

DIGEST = "sha256:" + "ab" * 32
YEAR_ONE = datetime(1, 1, 1, tzinfo=UTC)


def handler(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_isolation_{name}",
                                                  REPO / "functions" / name / "app.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.handler


class LostSend:
    """A crash before the send: the request stays `accepted` until the sweeper re-sends it."""

    def send(self, body: dict[str, Any]) -> str:
        raise DependencyUnavailable("The queue is unavailable.")


def queued(aws: Any, queue: str) -> list[dict[str, Any]]:
    sqs = aws.client("sqs")
    got = sqs.receive_message(QueueUrl=aws.physical.refs[queue], MaxNumberOfMessages=10,
                              WaitTimeSeconds=0).get("Messages", [])
    return [json.loads(m["Body"]) for m in got]


def test_a_sweep_with_a_year_one_observation_still_resends_every_other_tenants_stuck_request(aws):
    c = aws.container
    for tenant in ("evil", "demo", "globex"):
        c.tenancy.ensure_tenant(tenant, datetime.now(UTC))
    # The poison: a cache observation dated 0001-01-01, as ingest once accepted it, due at once.
    poisoned = CacheObservation("evil", DIGEST, "aws", "us-east-1a", "present", {},
                                YEAR_ONE, YEAR_ONE + timedelta(hours=1), datetime.now(UTC))
    c.cache_store.put_observation(poisoned, sweep_due=poisoned.expires_at)
    past = PrefetchService(c.cache_store, LostSend(), c.adapter_transports,
                           lambda: datetime.now(UTC) - timedelta(hours=1))
    stuck = {t: past.request(t, DIGEST, "aws", "us-west-2a", f"snap-{t}")[0].id
             for t in ("demo", "globex")}

    result = handler("cache_sweep")({}, LambdaContext("sweep"))

    assert result["requests_redispatched"] == 2
    assert {(m["tenant"], m["request_id"]) for m in queued(aws, "PrefetchQueue")} == set(
        stuck.items())


def test_an_aggregate_run_with_a_poisoned_attempt_still_rolls_up_every_other_tenant(aws):
    c = aws.container
    now = datetime.now(UTC)
    started = (now - timedelta(hours=3)).replace(minute=5, second=0, microsecond=0)
    doc = {"attempt_id": "a-1", "deployment": "coder", "operation": "create", "adapter": "aws",
           "runtime": "vllm", "compute_mode": "spot", "region": "us-east-1", "zone": "us-east-1a",
           "gpu": "H100", "gpu_count": 8, "outcome": "succeeded",
           "started_at": started.isoformat(), "finished_at": (started + timedelta(minutes=4)).isoformat()}
    for tenant in ("evil", "demo", "globex"):
        assert c.capacity.ingest(tenant, [doc], now).accepted == 1
    # The poison: evil's stored attempt no longer parses (a number field holding text).
    ddb = aws.client("dynamodb")
    ddb.update_item(TableName=aws.settings.capacity_table,
                    Key={"pk": {"S": "evil#ATTEMPT#a-1"}, "sk": {"S": "A"}},
                    UpdateExpression="SET gpu_count = :bad",
                    ExpressionAttributeValues={":bad": {"S": "eight"}})

    result = handler("aggregate")({}, LambdaContext("aggregate"))

    assert result["hours"] == 2
    hour = int(started.timestamp()) // 3600
    for tenant in ("demo", "globex"):
        rollups = list(c.capacity_store.rollups(tenant, hour, hour + 1))
        assert [r.attempts for r in rollups] == [1], tenant
    assert list(c.capacity_store.rollups("evil", hour, hour + 1)) == []
    # evil's hour stays dirty: the next run tries again, reports read it as tail meanwhile.
    assert [m.hour for m in c.capacity_store.dirty_hours("evil", hour, hour + 1)] == [hour]
