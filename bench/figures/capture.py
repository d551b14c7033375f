"""Figure 2: capture CPU cost per observation through the domain path, against its floor.

Domain path: `json.loads` of a 500-item batch body, `CaptureService.prepare` (body-field check,
pydantic validation, cross-field rules, HMAC pseudonymization of every identity) and building the
DynamoDB item of each observation (the adapter's pynamodb mapping, serialized). Floor: the same
`json.loads` plus an HMAC-SHA256 of every identity of every item (stdlib `hmac`), nothing else.
The domain HMACs each distinct raw id once per batch and adds one fingerprint HMAC per item; the
detail gives both counts, and the adapter's item build measured alone. Both are CPU time of this
process, no I/O (the store is never called), medians after a warm-up.

Two batch shapes: a gateway observation (id, tokens, timing, session and shared-prefix identities:
2 HMACs) and a Mooncake-trace row with its real prefix blocks (session + one HMAC per 512-token
block, ~tens per request).
"""

from __future__ import annotations

import cProfile
import hashlib
import hmac
import io
import json
import pstats
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import REPO, Figure, cpu_pair, info, main, median, ratio

BATCH = 500
REPEAT = 15
MOONCAKE = REPO / "tests" / "fixtures" / "traces" / "mooncake_fast25_synthetic_trace.jsonl"


class _Keyrings:
    """The keyring port, in memory: the cost measured is CPU, not Secrets Manager."""

    def __init__(self) -> None:
        from infercrane.domain.tenancy import Keyring, KeySet

        self.ring = Keyring("bench", KeySet.fresh(), KeySet.fresh())

    def get(self, tenant: str) -> Any:
        return self.ring

    def create(self, keyring: Any) -> None:
        raise NotImplementedError

    def put(self, keyring: Any) -> None:
        raise NotImplementedError


def gateway_items() -> list[dict[str, Any]]:
    start = datetime.now(UTC) - timedelta(hours=1)
    return [{"observation_id": f"gw-{i:06d}", "deployment": "coder-production",
             "arrival": (start + timedelta(milliseconds=37 * i)).isoformat().replace("+00:00", "Z"),
             "input_tokens": 2048 + i % 977, "output_tokens": 28 + i % 61,
             "cached_input_tokens": 1024, "ttft_ms": 120.5 + i % 13, "latency_ms": 850.25 + i % 97,
             "outcome": "ok", "streaming": True, "session_id": f"session-{i // 4}",
             "shared_prefix_id": f"system-prompt-{i % 3}"} for i in range(BATCH)]


def mooncake_items() -> list[dict[str, Any]]:
    start = datetime.now(UTC) - timedelta(hours=1)
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()[:BATCH]]
    return [{"observation_id": f"mc-{i:06d}", "deployment": "chat",
             "arrival": (start + timedelta(milliseconds=r["timestamp"])).isoformat()
             .replace("+00:00", "Z"),
             "input_tokens": r["input_length"], "output_tokens": r["output_length"],
             "latency_ms": 900.0, "session_id": f"session-{i // 3}",
             "prefix_block_ids": [str(h) for h in r["hash_ids"]], "prefix_block_size": 512}
            for i, r in enumerate(rows)]


def identities(item: dict[str, Any]) -> list[str]:
    named = [item[k] for k in ("session_id", "parent_session_id", "shared_prefix_id") if k in item]
    return named + [str(b) for b in item.get("prefix_block_ids") or ()]


def measure(shape: str, items: list[dict[str, Any]]) -> list[Figure]:
    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.observations import DynamoObservationStore
    from infercrane.domain.capture import CaptureService

    body = json.dumps({"items": items})
    keyrings = _Keyrings()
    # The adapter is built with a config only: nothing here opens a connection.
    store = DynamoObservationStore("bench-observations", DynamoConfig("us-east-1"), 30)
    service = CaptureService(store, keyrings)
    key = keyrings.ring.identity.key()
    hmacs = sum(len(identities(i)) for i in items)

    def domain() -> None:
        good, result = service.prepare("bench", json.loads(body)["items"])
        assert result.rejected == 0, result.errors[:1]
        for o in good:
            store._attributes(o)

    def floor() -> None:
        for item in json.loads(body)["items"]:
            for raw in identities(item):
                hmac.new(key, raw.encode("utf-8"), hashlib.sha256).hexdigest()

    built, _ = service.prepare("bench", json.loads(body)["items"])

    def item_build() -> None:  # the adapter's share of `domain`, measured alone
        for o in built:
            store._attributes(o)

    domain_s, floor_s = cpu_pair(domain, floor, REPEAT)
    adapter_s = median([cpu_seconds(item_build) for _ in range(REPEAT)])
    per_obs_us = domain_s / len(items) * 1e6
    value = domain_s / floor_s
    # The domain HMACs each distinct raw id once per batch (sessions and shared prefixes repeat),
    # plus one fingerprint per item; the floor HMACs every id as it comes. Both are reported.
    distinct = len({raw for i in items for raw in identities(i)})
    detail = (f"{len(items)}-item batch, {hmacs / len(items):.1f} HMACs/item in the floor, "
              f"{distinct / len(items):.2f} distinct ids/item + 1 fingerprint in the domain: "
              f"{per_obs_us:.0f} us/obs vs floor {floor_s / len(items) * 1e6:.0f} us/obs, of "
              f"which the adapter's item build {adapter_s / len(items) * 1e6:.0f} us/obs "
              f"(CPU, medians of {REPEAT})")
    fig = ratio(f"capture CPU/obs vs json.loads+HMAC floor ({shape})", value, "<= 3", detail,
                per_obs_us=round(per_obs_us, 1),
                floor_per_obs_us=round(floor_s / len(items) * 1e6, 1),
                adapter_item_build_per_obs_us=round(adapter_s / len(items) * 1e6, 1),
                hmacs_per_item=round(hmacs / len(items), 1),
                distinct_ids_per_item=round(distinct / len(items), 2))
    if fig.met is False:
        fig.extra["top_costs"] = profile(domain)
        fig.detail += "; top: " + "; ".join(fig.extra["top_costs"][:4])
    return [fig, info(f"capture observations/s per core ({shape})", 1 / (domain_s / len(items)),
                      "obs/s", "domain path only (validate, HMAC, build item), no I/O")]


def cpu_seconds(fn: Any) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def profile(fn: Any) -> list[str]:
    """Where the domain path's time goes: own-time leaders, as 'function (file) share'."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    out = []
    for (path, line, name), (_, _, own, _, _) in rows[:8]:
        short = path.split("site-packages/")[-1].split("shared/")[-1]
        out.append(f"{name} ({short}:{line}) {own / total:.0%}")
    return out


def run() -> list[Figure]:
    return measure("gateway, 2 identities", gateway_items()) + \
        measure("Mooncake rows, prefix blocks", mooncake_items())


if __name__ == "__main__":
    main(run)
