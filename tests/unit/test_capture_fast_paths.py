"""The capture path's shortcuts decide exactly as the rules they stand for.

Oracles are written here, independent of the code under test: a plain breadth-first walk for body
keys, `within_bounds` (datetime comparison) for the integer time range, the dataclass constructor
for `StoredObservation.from_fields`.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain.capture import ObservationIn, body_fields
from infercrane.domain.capture.items import _PLAIN_KEYS
from infercrane.domain.observation import StoredFields, StoredObservation
from infercrane.domain.validation import (
    BODY_FIELDS,
    bounds_us,
    epoch_us,
    plain_keys,
    within_bounds,
)


def reference_body_keys(document: Any) -> list[str]:
    found: list[str] = []
    queue = deque([document])
    while queue:
        node = queue.popleft()
        if isinstance(node, dict):
            for key, value in node.items():
                name = key.strip().lower()
                if name in BODY_FIELDS and name not in found:
                    found.append(name)
                queue.append(value)
        elif isinstance(node, list):
            queue.extend(node)
    return found


names = st.sampled_from([*sorted(ObservationIn.model_fields), "name", "overhead_ms",
                         *sorted(BODY_FIELDS), "Prompt", " text ", "MESSAGES", "other"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=5)), max_leaves=10)


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(names, documents, max_size=12))
def test_schema_keys_never_hide_a_body_field_at_any_depth(item):
    assert body_fields(item) == reference_body_keys(item)


def _open_schemas(schema: dict[str, Any], where: str = "item") -> list[str]:
    """Where a JSON schema lets a value hold keys it does not name: an object schema without
    `additionalProperties: false`, or a schema with no type at all (`Any`)."""
    found = []
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        found.append(where)
    if not {"type", "$ref", "anyOf", "enum", "const"} & schema.keys():
        found.append(where)
    children = [*(schema.get("properties") or {}).items(), *(schema.get("$defs") or {}).items(),
                *(("[]", s) for s in ([schema["items"]] if "items" in schema else [])),
                *((f"|{i}", s) for i, s in enumerate(schema.get("anyOf") or ()))]
    for name, child in children:
        found += _open_schemas(child, f"{where}.{name}")
    return found


def test_the_item_schema_admits_no_key_it_does_not_name_at_any_depth():
    # What lets capture skip the body-key walk for an item the schema accepts.
    assert _open_schemas(ObservationIn.model_json_schema()) == []
    assert _open_schemas({"type": "object", "properties": {"x": {}}}) == ["item", "item.x"]


valid_item = {"observation_id": "gw-1", "deployment": "chat", "arrival": "2026-11-29T19:00:00Z",
              "input_tokens": 10, "output_tokens": 2, "latency_ms": 5.0, "session_id": "s",
              "prefix_block_ids": ["b0", 1], "prefix_block_size": 16, "timing_source": "modeled",
              "timing_model": {"name": "linear-v1", "overhead_ms": 1.0,
                               "prefill_ms_per_token": 0.1, "decode_ms_per_token": 0.5}}
body_like = st.sampled_from([*sorted(BODY_FIELDS), "Prompt", " text ", "MESSAGES"])


@settings(max_examples=200, deadline=None)
@given(key=body_like, value=documents, where=st.sampled_from(
    ["top", "timing_model", "block", "scalar_field", "nested_block"]), also_invalid=st.booleans())
def test_an_item_with_a_body_key_anywhere_is_refused_for_it_first(key, value, where,
                                                                    also_invalid):
    # Oracle: the plain walk above. The body keys are named whatever else the item breaks.
    from infercrane.domain.capture import CaptureService
    from infercrane.domain.tenancy import Keyring, KeySet

    ring = Keyring("demo", KeySet.fresh(), KeySet.fresh())
    keyrings = type("K", (), {"get": lambda self, tenant: ring})()
    now = datetime(2026, 11, 29, 20, tzinfo=UTC)
    service = CaptureService(None, keyrings, clock=lambda: now)  # type: ignore[arg-type]
    assert service.prepare("demo", [valid_item])[1].accepted == 1  # the item the key rides on
    item: dict[str, Any] = json_copy(valid_item)
    if where == "top":
        item[key] = value
    elif where == "timing_model":
        item["timing_model"][key] = value
    elif where == "block":
        item["prefix_block_ids"].append({key: value})
    elif where == "scalar_field":
        item["deployment"] = {key: value}
    else:
        item["prefix_block_ids"].append([[{"x": {key: value}}]])
    if also_invalid:
        item["input_tokens"] = -1
    good, result = service.prepare("demo", [item])
    assert good == []
    assert [(e.field, e.code) for e in result.errors] == \
        [(name, "body_field_refused") for name in reference_body_keys(item)]


def json_copy(value: Any) -> Any:
    return {k: json_copy(v) for k, v in value.items()} if isinstance(value, dict) else \
        [json_copy(v) for v in value] if isinstance(value, list) else value


def test_a_schema_cannot_declare_a_body_like_key_plain():
    assert "input_tokens" in _PLAIN_KEYS
    with pytest.raises(ValueError, match="body-like"):
        plain_keys(["deployment", " Prompt"])


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59,
                       999_999), timezones=offsets)
near = st.datetimes(min_value=datetime(1999, 12, 31), max_value=datetime(2026, 12, 2),
                    timezones=offsets)


@settings(max_examples=300, deadline=None)
@given(moment=st.one_of(moments, near), now=st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)))
def test_integer_time_bounds_decide_as_within_bounds(moment, now):
    lo, hi = bounds_us(now)
    assert (lo <= epoch_us(moment) <= hi) == within_bounds(moment, now)


def test_the_edges_of_the_time_range_are_exact_to_the_microsecond():
    now = datetime(2026, 11, 29, 20, 0, 0, 500, tzinfo=UTC)
    lo, hi = bounds_us(now)
    for moment in (datetime(2000, 1, 1, tzinfo=UTC), now + timedelta(days=1),
                   now + timedelta(days=1, microseconds=1),
                   datetime(1999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
                   datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
                   datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))):
        assert (lo <= epoch_us(moment) <= hi) == within_bounds(moment, now), moment


def test_from_fields_is_the_constructor_for_every_field():
    # StoredFields (what mypy checks build's dict literal against) names exactly the fields.
    names = [f.name for f in dataclasses.fields(StoredObservation)]
    assert list(StoredFields.__annotations__) == names
    assert StoredFields.__required_keys__ == frozenset(names)
    values = {"tenant": "t", "deployment": "d", "observation_id": "o", "arrival_ms": 1,
              "input_tokens": 2, "output_tokens": 3, "latency_ms": 4.5, "outcome": "ok",
              "streaming": True, "sampling_rate": 1.0, "source": "captured", "ingested_at_ms": 5,
              "session_id": "v1:" + "0" * 64, "prefix_block_ids": ("v1:" + "1" * 64,)}
    built = StoredObservation(**values)  # type: ignore[arg-type]
    every = dataclasses.asdict(built)
    fast = StoredObservation.from_fields(every)  # type: ignore[arg-type]
    assert fast == built and dataclasses.asdict(fast) == every and fast.sort_key == built.sort_key
    assert hash(fast) == hash(built)
    many = StoredObservation.from_fields_many([dict(every), dict(every)])  # type: ignore[list-item]
    assert many == [built, built] and many[0] is not many[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tenant = "other"  # type: ignore[misc]


@pytest.mark.parametrize("memo", [3, 4096])
def test_a_batch_hmacs_a_remembered_raw_id_once_and_every_id_correctly(monkeypatch, memo):
    from infercrane.domain import capture
    from infercrane.domain.capture import prepare
    from infercrane.domain.identity import pseudonymize, pseudonymizer
    from infercrane.domain.tenancy import Keyring, KeySet

    hmacs: list[str] = []

    def counting(keys: KeySet) -> Any:
        inner = pseudonymizer(keys)
        return lambda raw: hmacs.append(raw) or inner(raw)

    monkeypatch.setattr(prepare, "_MEMO_IDS", memo)
    monkeypatch.setattr(prepare, "pseudonymizer", counting)
    ring = Keyring("demo", KeySet.fresh(), KeySet.fresh())
    keyrings = type("K", (), {"get": lambda self, tenant: ring})()
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    service = capture.CaptureService(None, keyrings, clock=lambda: now)  # type: ignore[arg-type]
    items = [{"deployment": "chat", "arrival": f"2026-11-29T19:00:{i:02d}Z", "input_tokens": 1,
              "output_tokens": 1, "latency_ms": 1.0, "session_id": f"s-{i % 5}",
              "prefix_block_ids": [f"b-{j}" for j in range(i % 7)], "prefix_block_size": 16}
             for i in range(30)]
    good, result = service.prepare("demo", items)
    assert result.rejected == 0
    for item, obs in zip(items, good, strict=True):
        assert obs.session_id == pseudonymize(item["session_id"], ring.identity)
        assert obs.prefix_block_ids == tuple(pseudonymize(b, ring.identity)
                                             for b in item["prefix_block_ids"])
    distinct = {i["session_id"] for i in items} | {b for i in items for b in i["prefix_block_ids"]}
    if memo >= len(distinct):
        assert sorted(hmacs) == sorted(distinct)
    else:  # past the memo every further id is HMAC'd as it comes
        assert len(hmacs) > len(distinct)


@given(arrival_ms=st.integers(-10**14, 10**15), observation_id=st.text(max_size=20))
def test_the_sort_key_is_the_zero_padded_arrival_then_the_id(arrival_ms, observation_id):
    o = StoredObservation("t", "d", observation_id, arrival_ms, 1, 1, 1.0, "ok", False, 1.0,
                          "captured", 0)
    assert o.sort_key == f"{arrival_ms:013d}#{observation_id}"
