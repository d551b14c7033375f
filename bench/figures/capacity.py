"""Figure 5: a 720 h capacity report at 10k and at 100k lifecycle attempts: items read and time.

Attempts come from `capacity_synth` (30 days, known ground truth). They go through the real
ingest and aggregator into the in-memory capacity port (`tests/support/capacity_memory.py`): moto
answers a GSI Query by walking the whole table, so running the aggregator there would time moto.
The rollup items the aggregator produced (hour rollups, and day rollups of the 30 closed days that a
720 h report reads) are then written with the DynamoDB adapter into the
template's CapacityTable in an in-process moto, copied out of it into `RangeTable` below, and
the report's Queries are answered from there, counting DynamoDB's items read (`ScannedCount`)
and the report's own read cost.

Why a stand-in and not moto: moto answers every Query page by sorting the whole table and writes
its answer through a shape-driven serializer (tens of microseconds per attribute value, and a
rollup item holds its groups as one large string), so served from moto the figure timed moto, not
the report. `RangeTable` is a sorted partition with DynamoDB's Query semantics for the requests
the capacity adapter makes (key condition `pk = :p [AND sk BETWEEN|<|<=|>|>= ...]`, `Limit`,
`ExclusiveStartKey`, 1 MB pages, `ScannedCount`), hooked into botocore's `before-send` (as moto
hooks in); anything else it refuses, so a changed access pattern fails loudly instead of being
measured wrong. It was the trace group's stand-in too until observations moved to segments
(issue 27): the `segment_traces` group now reads what moto stores, as the stack does.
"""

from __future__ import annotations

import bisect
import json
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import REGION, Figure, info, main, median, moto_stack, ratio

END = datetime(2026, 11, 29, tzinfo=UTC)
NOW = END + timedelta(minutes=5)
SIZES = (10_000, 100_000)
REPEAT = 5


PAGE_BYTES = 1024 * 1024

_COND = re.compile(r"^\(?\s*(#?\w+)\s*=\s*(:\w+)\s*\)?"
                   r"(?:\s+AND\s+\(?\s*(#?\w+)\s+(?:BETWEEN\s+(:\w+)\s+AND\s+(:\w+)|"
                   r"(<=|>=|<|>)\s*(:\w+))\s*\)?)?$", re.IGNORECASE)
_ALLOWED = {"TableName", "KeyConditionExpression", "ExpressionAttributeNames",
            "ExpressionAttributeValues", "Limit", "ExclusiveStartKey", "ConsistentRead",
            "ScanIndexForward", "ReturnConsumedCapacity"}


class RangeTable:
    """One DynamoDB table's Query, served from sorted partitions (see the module docstring).
    Items are kept as their JSON text, so serving a page costs a join, not an encode: what is
    timed is the client's work, as it would be against DynamoDB."""

    def __init__(self, name: str):
        self.name = name
        self.sks: dict[str, list[str]] = {}
        self.items: dict[str, list[str]] = {}

    def extend(self, pk: str, rows: Sequence[tuple[str, dict[str, Any]]]) -> None:
        sks, items = self.sks.setdefault(pk, []), self.items.setdefault(pk, [])
        for sk, item in rows:
            if sks and sk <= sks[-1]:
                raise ValueError("rows must arrive in sort-key order")
            sks.append(sk)
            items.append(json.dumps(item))

    def query(self, req: dict[str, Any]) -> bytes:
        unknown = set(req) - _ALLOWED
        if unknown or req.get("ScanIndexForward", True) is not True:
            raise NotImplementedError(f"RangeTable does not serve {sorted(unknown)}")
        names, values = req.get("ExpressionAttributeNames", {}), req["ExpressionAttributeValues"]
        m = _COND.match(req["KeyConditionExpression"].strip())
        if m is None:
            raise NotImplementedError("RangeTable serves only pk = :v [AND sk <op> ...]")
        hname, hval, rname, lo, hi, op, opval = m.groups()
        if names.get(hname, hname) != "pk" or (rname and names.get(rname, rname) != "sk"):
            raise NotImplementedError("RangeTable serves the table's own keys only")
        pk = values[hval]["S"]
        sks, texts = self.sks.get(pk, []), self.items.get(pk, [])
        start, end = 0, len(sks)
        if lo:
            start = bisect.bisect_left(sks, values[lo]["S"])
            end = bisect.bisect_right(sks, values[hi]["S"])
        elif op:
            v = values[opval]["S"]
            start, end = {"<": (0, bisect.bisect_left(sks, v)),
                          "<=": (0, bisect.bisect_right(sks, v)),
                          ">": (bisect.bisect_right(sks, v), len(sks)),
                          ">=": (bisect.bisect_left(sks, v), len(sks))}[op]
        if "ExclusiveStartKey" in req:
            start = max(start, bisect.bisect_right(sks, req["ExclusiveStartKey"]["sk"]["S"]))
        limit = int(req.get("Limit", 1 << 62))
        out: list[str] = []
        size, i = 0, start
        while i < end and len(out) < limit:
            size += len(texts[i])
            if out and size > PAGE_BYTES:
                break
            out.append(texts[i])
            i += 1
        tail = ""
        if i < end and out:
            tail = ', "LastEvaluatedKey": ' + json.dumps({"pk": {"S": pk}, "sk": {"S": sks[i - 1]}})
        # DynamoDB's ScannedCount: items read before any filter (there is none here).
        return (f'{{"Items": [{", ".join(out)}], "Count": {len(out)}, '
                f'"ScannedCount": {len(out)}{tail}}}').encode()


@contextmanager
def serve(table: RangeTable) -> Iterator[None]:
    """Answer DynamoDB Query requests for `table` inside botocore, before anything is sent."""
    from botocore.awsrequest import AWSResponse
    from botocore.handlers import BUILTIN_HANDLERS
    from moto.core.botocore_stubber import MockRawResponse

    from infercrane.adapters.aws_session import forget_shared_session

    def before_send(request: Any, **_: Any) -> Any:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        if not target.startswith("DynamoDB_"):
            return None
        body = json.loads(request.body)
        if target.endswith(".Query") and body.get("TableName") == table.name:
            payload = table.query(body)
            return AWSResponse(request.url, 200, {"Content-Type": "application/x-amz-json-1.0"},
                               MockRawResponse(payload))
        raise NotImplementedError(f"RangeTable does not serve {target}")

    BUILTIN_HANDLERS.append(("before-send", before_send))
    forget_shared_session()  # the next session's clients copy the built-in handlers, this one too
    try:
        yield
    finally:
        BUILTIN_HANDLERS.remove(("before-send", before_send))
        forget_shared_session()  # and clients made after this leave it out


class QueryMeter:
    """Sums `ScannedCount` over every Query response, as DynamoDB reports items read."""

    def __init__(self) -> None:
        self.scanned = 0
        self.pages: Counter[str] = Counter()

    @contextmanager
    def installed(self) -> Iterator[QueryMeter]:
        from botocore.client import BaseClient

        original = BaseClient._make_api_call
        meter = self

        def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            response = original(client, operation, params)
            if operation == "Query":
                meter.scanned += int(response.get("ScannedCount", 0))
                meter.pages[operation] += 1
            return response

        BaseClient._make_api_call = call
        try:
            yield self
        finally:
            BaseClient._make_api_call = original


def top_costs(fn: Any) -> list[str]:
    """The eight functions with the most own time in one call of `fn`, as shares of the total."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
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
            "bytes_read": sum(len(t) for t in days),
            "bytes_stored": sum(len(t) for t in days + hours),
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
