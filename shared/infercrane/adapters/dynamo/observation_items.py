"""The observation item: its pynamodb model (the schema) and the hand-written mapping to and from
DynamoDB attribute values that the store uses instead of building a model per item."""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import BooleanAttribute, ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from infercrane.domain.observation import StoredObservation


class ObservationItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    tenant = UnicodeAttribute()
    deployment = UnicodeAttribute()
    observation_id = UnicodeAttribute()
    arrival_ms = NumberAttribute()
    input_tokens = NumberAttribute()
    output_tokens = NumberAttribute()
    latency_ms = NumberAttribute()
    outcome = UnicodeAttribute()
    streaming = BooleanAttribute()
    sampling_rate = NumberAttribute()
    source = UnicodeAttribute()
    ingested_at_ms = NumberAttribute()
    expires_at = NumberAttribute()  # epoch seconds: DynamoDB TTL
    revision = UnicodeAttribute(null=True)
    cached_input_tokens = NumberAttribute(null=True)
    ttft_ms = NumberAttribute(null=True)
    provenance = UnicodeAttribute(null=True)
    timing_source = UnicodeAttribute()
    timing_model = UnicodeAttribute(null=True)
    session_id = UnicodeAttribute(null=True)
    parent_session_id = UnicodeAttribute(null=True)
    shared_prefix_id = UnicodeAttribute(null=True)
    prefix_block_ids = ListAttribute(of=UnicodeAttribute, null=True)
    prefix_block_size = NumberAttribute(null=True)
    key_version = UnicodeAttribute(null=True)
    fingerprint = UnicodeAttribute(null=True)  # claims and client-named observations


_OPTIONAL_STRINGS = ("revision", "provenance", "timing_model", "session_id", "parent_session_id",
                     "shared_prefix_id", "key_version", "fingerprint")
_OPTIONAL_NUMBERS = ("cached_input_tokens", "ttft_ms", "prefix_block_size")


def _number(text: str) -> int | float:
    """A stored number as `json.loads` reads it (int when integral text), at int()'s cost."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def partition(tenant: str, deployment: str) -> str:
    return f"{tenant}#{deployment}"


# Items are mapped to and from DynamoDB's attribute values directly: building a pynamodb
# model per item only to serialize it was most of the capture path's CPU and of a trace
# build's time (make bench). The model above stays the schema and the connection.
def attributes(o: StoredObservation, retention_s: int) -> dict[str, dict[str, Any]]:
    # Fields read from the instance dict and numbers written by `str` in place (no call per
    # attribute; `str` of an int or a float is the text pynamodb's NumberAttribute writes, a
    # float's str being its repr): this mapping was a quarter of capture's CPU per
    # observation (make bench, group `capture`). tests/unit/test_observation_item_mapping.py
    # holds it to pynamodb's own serialization of the model above.
    f = o.__dict__
    item: dict[str, dict[str, Any]] = {
        "pk": {"S": partition(f["tenant"], f["deployment"])}, "sk": {"S": o.sort_key},
        "tenant": {"S": f["tenant"]}, "deployment": {"S": f["deployment"]},
        "observation_id": {"S": f["observation_id"]}, "arrival_ms": {"N": str(f["arrival_ms"])},
        "input_tokens": {"N": str(f["input_tokens"])},
        "output_tokens": {"N": str(f["output_tokens"])},
        "latency_ms": {"N": str(f["latency_ms"])}, "outcome": {"S": f["outcome"]},
        "streaming": {"BOOL": f["streaming"]}, "sampling_rate": {"N": str(f["sampling_rate"])},
        "source": {"S": f["source"]}, "ingested_at_ms": {"N": str(f["ingested_at_ms"])},
        "expires_at": {"N": str(f["ingested_at_ms"] // 1000 + retention_s)},
        "timing_source": {"S": f["timing_source"]},
    }
    for name in _OPTIONAL_STRINGS:
        value = f[name]
        if value is not None:
            item[name] = {"S": value}
    for name in _OPTIONAL_NUMBERS:
        value = f[name]
        if value is not None:
            item[name] = {"N": str(value)}
    blocks = f["prefix_block_ids"]
    if blocks is not None:
        item["prefix_block_ids"] = {"L": [{"S": b} for b in blocks]}
    return item

def observation(raw: dict[str, dict[str, Any]]) -> StoredObservation:
    def s(name: str) -> Any:
        value = raw.get(name)
        return None if value is None else value["S"]

    def n(name: str) -> Any:
        value = raw.get(name)
        return None if value is None else _number(value["N"])

    blocks = raw.get("prefix_block_ids")
    cached, ttft, block_size = n("cached_input_tokens"), n("ttft_ms"), n("prefix_block_size")
    return StoredObservation(
        tenant=s("tenant"), deployment=s("deployment"), observation_id=s("observation_id"),
        arrival_ms=int(n("arrival_ms")), input_tokens=int(n("input_tokens")),
        output_tokens=int(n("output_tokens")), latency_ms=float(n("latency_ms")),
        outcome=s("outcome"), streaming=bool(raw["streaming"]["BOOL"]),
        sampling_rate=float(n("sampling_rate")), source=s("source"),
        ingested_at_ms=int(n("ingested_at_ms")), revision=s("revision"),
        cached_input_tokens=None if cached is None else int(cached),
        ttft_ms=None if ttft is None else float(ttft), provenance=s("provenance"),
        timing_source=s("timing_source"), timing_model=s("timing_model"),
        session_id=s("session_id"), parent_session_id=s("parent_session_id"),
        shared_prefix_id=s("shared_prefix_id"),
        prefix_block_ids=None if blocks is None else tuple(b["S"] for b in blocks["L"]),
        prefix_block_size=None if block_size is None else int(block_size),
        key_version=s("key_version"), fingerprint=s("fingerprint"),
    )
