"""Figure 5: a 720 h capacity report at 10k and at 100k lifecycle attempts: items read and time.

Attempts come from `capacity_synth` (30 days, known ground truth). They go through the real
ingest and aggregator into the in-memory capacity port (`tests/support/capacity_memory.py`): moto
answers a GSI Query by walking the whole table, so running the aggregator there would time moto.
The rollup items the aggregator produced (hour rollups, and day rollups of the 30 closed days that a
720 h report reads) are then written with the DynamoDB adapter into the
template's CapacityTable in an in-process moto, copied out of it into `RangeTable` (see
`traces.py`: moto's serializer, not the report, dominated the time when served from moto), and
the report's Queries are answered from there, counting DynamoDB's items read (`ScannedCount`)
and the report's own read cost.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import REGION, Figure, info, main, median, moto_stack, ratio
from bench.figures.traces import QueryMeter, RangeTable, serve

END = datetime(2026, 11, 29, tzinfo=UTC)
NOW = END + timedelta(minutes=5)
SIZES = (10_000, 100_000)
REPEAT = 5


def rollups(n: int) -> tuple[Any, float]:
    from tests.support.capacity_memory import MemoryCapacityStore

    from infercrane.domain import capacity_synth
    from infercrane.domain.capacity import CapacityService

    synth = capacity_synth.generate(n, seed=42, end=END, id_prefix=f"n{n}")
    store = MemoryCapacityStore()
    service = CapacityService(store)
    t0 = time.perf_counter()
    for batch in capacity_synth.batches(synth.attempts):
        service.ingest("acme", batch, NOW)
    service.aggregate(NOW)
    return store, time.perf_counter() - t0


def load(stack: Any, n: int, into: RangeTable) -> float:
    """Rollups of n attempts, written by the DynamoDB adapter (moto), then copied into `into`."""
    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.capacity import DynamoCapacityStore
    from infercrane.domain.capacity import DayRollup, HourRollup

    memory, prepare_s = rollups(n)
    tenant = f"acme{n}"  # one tenant per size: the two reports never share a partition
    store = DynamoCapacityStore(stack.env["INFERCRANE_CAPACITY_TABLE"], DynamoConfig(REGION))
    for (_, hour), (version, docs) in memory.rollup_items.items():
        store.put_rollup(HourRollup.from_group_docs(tenant, hour, version, json.loads(docs)))
    store.put_day_rollups([DayRollup.from_group_docs(tenant, day, version, json.loads(docs))
                           for (_, day), (version, docs) in memory.day_items.items()])
    ddb = stack.client("dynamodb")
    for pk in (f"{tenant}#ROLLUP", f"{tenant}#DAY", f"{tenant}#DIRTY"):
        args: dict[str, Any] = {"TableName": stack.env["INFERCRANE_CAPACITY_TABLE"],
                                "KeyConditionExpression": "pk = :p",
                                "ExpressionAttributeValues": {":p": {"S": pk}}}
        rows: list[tuple[str, dict[str, Any]]] = []
        while True:
            page = ddb.query(**args)
            rows += [(i["sk"]["S"], i) for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                break
            args["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        into.extend(pk, sorted(rows, key=lambda r: r[0]))
    return prepare_s


def measure(table: RangeTable, n: int) -> dict[str, Any]:
    """One report at n attempts: DynamoDB items read, bytes and the report's own read cost."""
    from infercrane.adapters.dynamo.base import DynamoConfig
    from infercrane.adapters.dynamo.capacity import DynamoCapacityStore
    from infercrane.domain.capacity import CapacityService

    tenant = f"acme{n}"
    service = CapacityService(DynamoCapacityStore(table.name, DynamoConfig(REGION)))
    with QueryMeter().installed() as meter:
        report = service.report(tenant, "720h", END, None, NOW)
        scanned = meter.scanned
    days = table.items.get(f"{tenant}#DAY", [])
    hours = table.items.get(f"{tenant}#ROLLUP", [])
    return {"n": n, "scanned": scanned, "service": service, "read": report["read"],
            # The 720 h window is 30 whole closed days: the report reads the day items only.
            "bytes_read": sum(len(t or "") for t in days),
            "bytes_stored": sum(len(t or "") for t in days + hours),
            "groups": len(report["groups"]),
            "samples": sum(g["samples"] for g in report["groups"]), "times": []}


def time_reports(rows: list[dict[str, Any]]) -> None:
    """REPEAT reports at each size, the sizes alternating, so a burst of load on the shared
    machine lands on both sizes rather than on one; each size's figure is its median."""
    for _ in range(REPEAT):
        for r in rows:
            t0 = time.perf_counter()
            r["service"].report(f"acme{r['n']}", "720h", END, None, NOW)
            r["times"].append(time.perf_counter() - t0)
    for r in rows:
        r["seconds"] = median(r["times"])


def run() -> list[Figure]:
    with moto_stack() as stack:
        table = RangeTable(stack.env["INFERCRANE_CAPACITY_TABLE"])
        prepare_s = {n: load(stack, n, table) for n in SIZES}
    # Served outside moto: its per-page cost grows with item size and would be what is timed.
    with serve(table):
        small, large = (measure(table, n) for n in SIZES)
        time_reports([small, large])
    for r in (small, large):
        if r["samples"] != r["n"]:
            raise RuntimeError(f"the report counts {r['samples']} attempts, expected {r['n']}")
    rollup_ratio = large["read"]["rollup_items"] / max(1, small["read"]["rollup_items"])
    fig_time = ratio("capacity report 720 h: time at 100k / 10k attempts",
                     large["seconds"] / small["seconds"], "<= 1.2",
                     f"{small['seconds'] * 1000:.0f} ms vs {large['seconds'] * 1000:.0f} ms "
                     f"(medians of {REPEAT}, sizes alternating; DynamoDB Query answered "
                     f"in-process); rollup bytes read {small['bytes_read'] / 1e6:.2f} MB vs "
                     f"{large['bytes_read'] / 1e6:.2f} MB (stored, hours and days: "
                     f"{small['bytes_stored'] / 1e6:.1f} MB vs {large['bytes_stored'] / 1e6:.1f} MB)",
                     small_ms=round(small["seconds"] * 1000, 1),
                     large_ms=round(large["seconds"] * 1000, 1))
    if fig_time.met is False:
        from bench.figures.traces import top_costs
        from infercrane.adapters.dynamo.base import DynamoConfig
        from infercrane.adapters.dynamo.capacity import DynamoCapacityStore
        from infercrane.domain.capacity import CapacityService

        with serve(table):
            service = CapacityService(DynamoCapacityStore(table.name, DynamoConfig(REGION)))
            fig_time.extra["top_costs"] = top_costs(
                lambda: service.report(f"acme{SIZES[1]}", "720h", END, None, NOW))
        fig_time.detail += "; top at 100k: " + "; ".join(fig_time.extra["top_costs"][:4])
    return [
        ratio("capacity report 720 h: items read at 100k / 10k attempts",
              large["scanned"] / small["scanned"], "<= 1.2",
              f"DynamoDB items read {small['scanned']:,} vs {large['scanned']:,}; rollup items "
              f"{small['read']['rollup_items']} vs {large['read']['rollup_items']} "
              f"({rollup_ratio:.2f}x), tail attempts {small['read']['tail_attempts']} vs "
              f"{large['read']['tail_attempts']}; {small['groups']} groups",
              small=small["scanned"], large=large["scanned"]),
        fig_time,
        info("capacity ingest + aggregate, 100k attempts", prepare_s[SIZES[1]], "s",
             "in-memory port (the data set for the report; not a target)"),
    ]


if __name__ == "__main__":
    main(run)
