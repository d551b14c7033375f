"""The one definition of a segment row: an observation as stored in a segment on S3.

A segment (issue "fleet-scale capture") is one immutable object per accepted batch and hour,
holding that batch's observations as rows under `observations/tenant=<t>/deployment=<d>/
date=<YYYY-MM-DD>/hour=<HH>/`. Tenant, deployment, date and hour are the object's path (Hive
partitions), so a row holds the rest of `StoredObservation`: every value a number, an enum, an
identifier of a fixed charset or an HMAC, never a body. `COLUMNS` is the schema: the segment
writer's keys, the Glue table's columns (template.yaml) and the table in docs/capture.md are all
generated from it, and tests hold each of them to it.

`SCHEMA_VERSION` changes only when a row's meaning changes; adding a nullable column does not (a
reader treats a missing key as null, as Athena's JSON SerDe and DuckDB do).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from itertools import repeat
from operator import or_
from typing import Any, Final

from infercrane.domain.observation import StoredFields, StoredObservation

SCHEMA_VERSION: Final = 1


@dataclass(frozen=True)
class Column:
    name: str  # the row's key and the SQL column's name
    sql_type: str  # Hive/Glue type, as Athena reads it
    required: bool  # present in every row; the others are omitted when null
    doc: str


COLUMNS: Final[tuple[Column, ...]] = (
    Column("observation_id", "string", True,
           "the gateway's id, or `h-` + 32 hex of the content's fingerprint"),
    Column("arrival_ms", "bigint", True, "arrival, epoch milliseconds UTC"),
    Column("input_tokens", "bigint", True, "input tokens"),
    Column("output_tokens", "bigint", True, "output tokens"),
    Column("latency_ms", "double", True, "end-to-end latency, ms"),
    Column("outcome", "string", True,
           "`ok`, `client_error`, `server_error`, `timeout` or `cancelled`"),
    Column("streaming", "boolean", True, "streamed response"),
    Column("sampling_rate", "double", True, "(0, 1]: the share of traffic this row stands for"),
    Column("source", "string", True, "`captured` or `imported`"),
    Column("ingested_at_ms", "bigint", True, "when the service accepted it, epoch ms"),
    Column("timing_source", "string", True, "`observed` or `modeled`"),
    Column("revision", "string", False, "the deployment's revision"),
    Column("cached_input_tokens", "bigint", False, "input tokens served from a prefix cache"),
    Column("ttft_ms", "double", False, "time to first token, ms"),
    Column("provenance", "string", False,
           "imports: `<format>:sha256:<digest of format and options>`"),
    Column("timing_model", "string", False,
           "modeled timing: the model's parameters as canonical JSON"),
    Column("session_id", "string", False, "`v<N>:<64 hex>`, HMAC of the session id"),
    Column("parent_session_id", "string", False, "`v<N>:<64 hex>`, HMAC"),
    Column("shared_prefix_id", "string", False, "`v<N>:<64 hex>`, HMAC"),
    Column("prefix_block_ids", "array<string>", False, "HMACs of the prefix's blocks, in order"),
    Column("prefix_block_size", "int", False, "tokens per prefix block"),
    Column("key_version", "string", False, "identity key version of every HMAC in the row"),
    Column("fingerprint", "string", False,
           "client-chosen ids only: HMAC of the content, to tell an id naming two contents"),
)

# Hive partitions, in path order: the object's key holds them, not its rows.
PARTITIONS: Final[tuple[Column, ...]] = (
    Column("tenant", "string", True, "the tenant (every query must name it)"),
    Column("deployment", "string", True, "the deployment"),
    Column("date", "string", True, "UTC date of the rows' arrivals, YYYY-MM-DD"),
    Column("hour", "string", True, "UTC hour of the rows' arrivals, 00-23"),
)

# A segment holds one UTC hour of arrivals (the `hour` partition): the writer splits a batch by
# it, the reader knows a segment reaching an instant begins at that instant's hour or later.
HOUR_MS: Final = 3_600_000


def hour_of(arrival_ms: int) -> int:
    """The start of the UTC hour holding `arrival_ms` (epoch ms)."""
    return arrival_ms - arrival_ms % HOUR_MS


_REQUIRED: Final = tuple(c.name for c in COLUMNS if c.required)
_OPTIONAL: Final = tuple(c.name for c in COLUMNS if not c.required)


def to_row(obs: StoredObservation) -> dict[str, Any]:
    """The row for `obs`: every required column, and each optional one that is not null."""
    values = obs.__dict__  # from_fields instances hold exactly the fields (see observation.py)
    row = {name: values[name] for name in _REQUIRED}
    for name in _OPTIONAL:
        value = values[name]
        if value is not None:
            row[name] = list(value) if name == "prefix_block_ids" else value
    return row


# A row read back, merged into every field's null in the dataclass's order (`from_rows`): the
# optional columns a row omits stay null.
_TEMPLATE: Final[dict[str, Any]] = dict.fromkeys(f.name for f in fields(StoredObservation))
_REQUIRED_KEYS: Final = frozenset(_REQUIRED)
_COLUMN_KEYS: Final = frozenset(c.name for c in COLUMNS)


def from_rows(tenant: str, deployment: str, rows: Iterable[Any]) -> list[StoredObservation]:
    """The observations rows (as read back from JSON) store, in `deployment` of `tenant`: each
    as `from_row` reads it, a segment's at once.

    When every row is a dict of the schema's keys only, the required ones present (every row a
    writer writes), the rows are merged into `_TEMPLATE` with C-level loops: the keys checked
    once per distinct key sequence (a writer's rows share a handful), each row a `template |
    row`. Building each dict key by key was a third of a read's decode, a Python step a row
    still a quarter (100,000 rows: 0.18 s against 0.11 s). Other rows are `from_row`'s, which
    ignores an unknown key and raises on a missing one as before."""
    rows = rows if isinstance(rows, list) else list(rows)
    shapes = set(map(tuple, rows)) if set(map(type, rows)) <= {dict} else None
    if shapes is None or not all(_COLUMN_KEYS.issuperset(keys) and _REQUIRED_KEYS.issubset(keys)
                                 for keys in shapes):
        return [from_row(tenant, deployment, row) for row in rows]
    values = list(map(or_, repeat({**_TEMPLATE, "tenant": tenant, "deployment": deployment}),
                      rows))
    if any("prefix_block_ids" in keys for keys in shapes):  # JSON arrays, as tuples
        for v in values:
            if v["prefix_block_ids"] is not None:
                v["prefix_block_ids"] = tuple(v["prefix_block_ids"])
    return StoredObservation.from_fields_many(values)


def from_row(tenant: str, deployment: str, row: Any) -> StoredObservation:
    """The observation a row (as read back from JSON) stores, in `deployment` of `tenant`: the
    required columns by key (KeyError when one is missing), the optional ones null when absent,
    unknown keys ignored; a row that is no JSON object is a TypeError."""
    if not isinstance(row, dict):
        raise TypeError(f"a row is a JSON object, not {type(row).__name__}")
    get = row.get
    blocks = get("prefix_block_ids")
    values: StoredFields = {
        "tenant": tenant, "deployment": deployment,
        "observation_id": row["observation_id"], "arrival_ms": row["arrival_ms"],
        "input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"],
        "latency_ms": row["latency_ms"], "outcome": row["outcome"],
        "streaming": row["streaming"], "sampling_rate": row["sampling_rate"],
        "source": row["source"], "ingested_at_ms": row["ingested_at_ms"],
        "revision": get("revision"), "cached_input_tokens": get("cached_input_tokens"),
        "ttft_ms": get("ttft_ms"), "provenance": get("provenance"),
        "timing_source": row["timing_source"],  # the dataclass's order, as from_rows makes it
        "timing_model": get("timing_model"), "session_id": get("session_id"),
        "parent_session_id": get("parent_session_id"),
        "shared_prefix_id": get("shared_prefix_id"),
        "prefix_block_ids": tuple(blocks) if blocks is not None else None,
        "prefix_block_size": get("prefix_block_size"), "key_version": get("key_version"),
        "fingerprint": get("fingerprint"),
    }
    return StoredObservation.from_fields(values)
