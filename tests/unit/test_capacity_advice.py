"""Placement advice: ranked by the Wilson lower bound (SciPy as oracle), quota flagged, one tenant."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console
from scipy.stats import binomtest

from infercrane.cli.capacity import render_advice
from infercrane.domain.capacity import CapacityService
from infercrane.domain.capacity.advice import QUOTA_FLAG, advise
from infercrane.errors import InvalidInput
from infercrane.http.routes import routers
from infercrane.local.template import load
from tests.support.capacity_memory import MemoryCapacityStore

END = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
NOW = END + timedelta(minutes=5)
CODES = {"capacity": "InsufficientInstanceCapacity", "quota": "VcpuLimitExceeded"}


def attempts(prefix, *, mode, region, ok=0, capacity=0, quota=0, seconds=300, gpu="H100",
             hours_ago=3):
    out = []
    kinds = ["succeeded"] * ok + ["capacity"] * capacity + ["quota"] * quota
    for i, kind in enumerate(kinds):
        start = END - timedelta(hours=hours_ago, seconds=10 * i)
        doc = {"attempt_id": f"{prefix}-{i}", "deployment": "d", "operation": "create",
               "adapter": "aws", "runtime": "vllm", "compute_mode": mode, "region": region,
               "gpu": gpu, "gpu_count": 8, "started_at": start.isoformat(),
               "finished_at": (start + timedelta(seconds=seconds + i % 7)).isoformat(),
               "outcome": "succeeded" if kind == "succeeded" else "failed"}
        if kind != "succeeded":
            doc["error_code"] = CODES[kind]
        out.append(doc)
    return out


@pytest.fixture
def svc():
    s = CapacityService(MemoryCapacityStore())
    items = (attempts("a", mode="on-demand", region="us-east-1", ok=60, capacity=3, seconds=400)
             + attempts("b", mode="spot", region="us-east-1", ok=4)
             + attempts("c", mode="on-demand", region="us-west-2", ok=30, quota=25, seconds=200)
             + attempts("d", mode="spot", region="us-west-2", ok=20, capacity=20)
             + attempts("e", mode="spot", region="eu-west-1", ok=60, capacity=3, seconds=900)
             + attempts("l4", mode="spot", region="us-east-1", ok=50, gpu="L4"))
    for i in range(0, len(items), 500):
        assert s.ingest("acme", items[i:i + 500], NOW).rejected == 0
    return s


def lower(k, n):
    return binomtest(k, n).proportion_ci(method="wilson").low


def test_options_rank_by_wilson_lower_bound_then_p95_and_say_why(svc):
    doc = advise(svc, "acme", gpu="H100", count=8, adapter=None, window="72h", until=END, now=NOW)
    assert doc["scope"] == "tenant-observed"
    assert "not global availability" in doc["note"]
    got = [(o["region"], o["compute_mode"]) for o in doc["options"]]
    # The oracle: SciPy's Wilson lower bound over succeeded / (succeeded + non-quota failures).
    truth = {("us-east-1", "on-demand"): (60, 63, 400), ("us-east-1", "spot"): (4, 4, None),
             ("us-west-2", "on-demand"): (30, 30, 200), ("us-west-2", "spot"): (20, 40, None),
             ("eu-west-1", "spot"): (60, 63, 900)}
    want = sorted(truth, key=lambda k: (-round(lower(*truth[k][:2]), 6), truth[k][2] or 1e9))
    assert got == want
    assert all(o["gpu"] == "H100" for o in doc["options"])  # L4 never mixes in
    # Same interval, shorter p95 first: us-east-1 on-demand (400 s) before eu-west-1 (900 s).
    assert got.index(("us-east-1", "on-demand")) < got.index(("eu-west-1", "spot"))
    eu = next(o for o in doc["options"] if o["region"] == "eu-west-1")
    assert "slower" in eu["why"]
    for o in doc["options"]:
        assert f"n={o['placement_n']}" in o["basis"]
        assert o["why"]
    spot = next(o for o in doc["options"] if o["region"] == "us-west-2" and
                o["compute_mode"] == "spot")
    assert spot["dominant_failure"] == {"class": "capacity", "count": 20, "of": 20}
    assert "dominant failure capacity (20 of 20)" in spot["basis"]


def test_quota_failures_are_flagged_not_ranked_down_as_unavailable(svc):
    doc = advise(svc, "acme", gpu="H100", count=None, adapter="aws", window="72h", until=END,
                 now=NOW)
    quota = next(o for o in doc["options"] if o["region"] == "us-west-2" and
                 o["compute_mode"] == "on-demand")
    assert quota["flag"] == QUOTA_FLAG
    assert quota["quota_failures"] == 25 and quota["placement_n"] == 30
    assert quota["rank"] == 1  # 30 of 30 placements succeeded; 25 quota refusals are the limit
    assert all(o["flag"] is None for o in doc["options"] if o is not quota)


def test_advice_is_one_tenants_evidence_only(svc):
    other = advise(svc, "other", gpu="H100", count=None, adapter=None, window="72h", until=END,
                   now=NOW)
    assert other["options"] == []


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"gpu": "H 100"}, "gpu"), ({"gpu": "H100", "count": 0}, "count"),
    ({"gpu": "H100", "adapter": "azure"}, "adapter")])
def test_bad_queries_name_their_field(svc, kwargs, field):
    args = {"count": None, "adapter": None, **kwargs}
    with pytest.raises(InvalidInput) as err:
        advise(svc, "acme", window="72h", until=END, now=NOW, **args)
    assert err.value.field == field


def test_table_shows_rank_interval_flag_and_scope(svc):
    doc = advise(svc, "acme", gpu="H100", count=8, adapter=None, window="72h", until=END, now=NOW)
    console = Console(record=True, width=400, color_system=None)
    render_advice(console, doc)
    text = " ".join(console.export_text().split())
    assert "placement advice for H100 x8" in text
    assert QUOTA_FLAG in text
    assert "not global availability" in text


def test_every_api_route_has_its_template_event_and_back():
    template = load(__import__("pathlib").Path(__file__).parents[2] / "template.yaml")
    events = {(r.method, r.path) for r in template.routes if r.function == "ApiFunction"}
    routes = set()
    for router in routers():
        for key in router._routes:
            path = re.sub(r"<(\w+)>", r"{\1}", key[0])
            routes.update((m, path) for m in key[1])
    assert ("GET", "/v1/capacity/advice") in routes
    assert routes - events == set()
    assert events - routes <= {("GET", "/v1/openapi.json")}


def test_advice_at_80_columns_cuts_nothing(svc):
    doc = advise(svc, "acme", gpu="H100", count=8, adapter=None, window="72h", until=END, now=NOW)
    console = Console(record=True, width=80, color_system=None)
    render_advice(console, doc)
    text = console.export_text()
    assert "…" not in text
    flat = " ".join(text.split())
    assert QUOTA_FLAG in flat
    for o in doc["options"]:
        assert f"{o['rank']} · {o['region']} · {o['compute_mode']} · {o['adapter']}" in flat
        assert o["why"] in flat
