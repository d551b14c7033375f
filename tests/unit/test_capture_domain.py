"""Capture domain: per-item validation, body refusal, pseudonymization, batch semantics."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infercrane.domain import identity
from infercrane.domain.capture import MAX_BATCH, CaptureService, batch_items, parse_time
from infercrane.domain.observation import StoredObservation
from infercrane.domain.tenancy import Keyring, KeySet
from infercrane.domain.validation import BODY_FIELDS
from infercrane.errors import InvalidInput, NotFound, PayloadTooLarge
from infercrane.ports.observations import WriteStats

CANARY = "CANARY-7f3e-PROMPT-do-not-store"
NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


class MemoryStore:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], StoredObservation] = {}

    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        new = 0
        for o in observations:
            key = (o.tenant, o.deployment, o.sort_key)
            if key not in self.items:
                self.items[key] = o
                new += 1
        return WriteStats(new, (new + 24) // 25, 0, skipped=len(observations) - new)

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, decided: object = None) -> Iterator[StoredObservation]:
        rows = sorted((o for (t, d, _), o in self.items.items() if t == tenant and d == deployment
                       and start_ms <= o.arrival_ms < end_ms), key=lambda o: o.sort_key)
        yield from rows[:limit]

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        doomed = [k for k, o in self.items.items() if k[0] == tenant and k[1] == deployment
                  and (before_ms is None or o.arrival_ms < before_ms)]
        for k in doomed:
            del self.items[k]
        return len(doomed)


class MemoryKeyrings:
    def __init__(self, *tenants: str) -> None:
        self.rings = {t: Keyring(t, KeySet.fresh(), KeySet.fresh()) for t in tenants}

    def create(self, keyring: Keyring) -> None:
        self.rings[keyring.tenant] = keyring

    def get(self, tenant: str) -> Keyring:
        if tenant not in self.rings:
            raise NotFound("No such tenant.", field="tenant")
        return self.rings[tenant]

    def put(self, keyring: Keyring) -> None:
        self.rings[keyring.tenant] = keyring


def item(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"deployment": "coder-production", "arrival": "2026-11-29T19:00:00.123Z",
                            "input_tokens": 812, "output_tokens": 96, "latency_ms": 1840.5}
    base.update(over)
    return base


@pytest.fixture
def env() -> tuple[CaptureService, MemoryStore, MemoryKeyrings]:
    store, rings = MemoryStore(), MemoryKeyrings("demo", "other")
    return CaptureService(store, rings, clock=lambda: NOW), store, rings


def stored(store: MemoryStore) -> list[StoredObservation]:
    return list(store.items.values())


@pytest.mark.parametrize("name", ["prompt", "messages", "input", "output", "completion",
                                  "content", "text", "Prompt"])
def test_capture_refuses_body_field_by_name_without_echoing_it(env, name):
    service, store, _ = env
    result = service.ingest("demo", [item(**{name: CANARY})])
    assert (result.accepted, result.rejected) == (0, 1)
    assert result.errors[0].code == "body_field_refused"
    assert result.errors[0].field == name.lower()  # our spelling, never the submitted one
    assert CANARY not in json.dumps(result.to_document())
    assert stored(store) == []


def test_capture_stores_valid_items_and_rejects_invalid_ones_individually(env):
    service, store, _ = env
    result = service.ingest("demo", [item(observation_id="a"), item(input_tokens=-1),
                                     item(observation_id="c", ttft_ms=2000.0),
                                     item(observation_id="d", ttft_ms=100.0), "not an object"])
    assert (result.accepted, result.rejected) == (2, 3)
    assert [(e.index, e.field, e.code) for e in result.errors] == [
        (1, "input_tokens", "out_of_range"), (2, "ttft_ms", "out_of_range"),
        (4, None, "invalid_type")]
    assert sorted(o.observation_id for o in stored(store)) == ["a", "d"]


def test_capture_accepts_real_long_context_but_not_absurd_values(env):
    service, _, _ = env
    ok = service.ingest("demo", [item(input_tokens=2_000_000, latency_ms=3_600_000.0)])
    bad = service.ingest("demo", [item(input_tokens=10_000_001), item(latency_ms=86_400_001.0),
                                  item(arrival="1999-12-31T23:59:59Z"),
                                  item(cached_input_tokens=900)])
    assert ok.accepted == 1
    assert [e.field for e in bad.errors] == ["input_tokens", "latency_ms", "arrival",
                                             "cached_input_tokens"]


def test_capture_truncates_arrival_to_the_millisecond(env):
    service, store, _ = env
    service.ingest("demo", [item(arrival="2026-11-29T19:00:00.1239999Z")])
    (obs,) = stored(store)
    assert obs.arrival_ms == int(datetime(2026, 11, 29, 19, 0, tzinfo=UTC).timestamp() * 1000) + 123


def test_capture_pseudonymizes_every_identity_with_the_tenant_key(env):
    service, store, rings = env
    service.ingest("demo", [item(session_id="alice-session", parent_session_id="root",
                                 shared_prefix_id="sys-prompt-v2", prefix_block_ids=[7, "8"],
                                 prefix_block_size=512)])
    (obs,) = stored(store)
    keys = rings.get("demo").identity
    assert obs.session_id == identity.pseudonymize("alice-session", keys)
    assert obs.prefix_block_ids == (identity.pseudonymize("7", keys), identity.pseudonymize("8", keys))
    assert obs.key_version == "v1"
    text = repr(obs)
    for raw in ("alice-session", "root", "sys-prompt-v2"):
        assert raw not in text


def test_same_raw_id_links_within_a_tenant_and_not_across_tenants(env):
    service, store, _ = env
    service.ingest("demo", [item(observation_id="x1", session_id="s-42"),
                            item(observation_id="x2", session_id="s-42")])
    service.ingest("other", [item(observation_id="x1", session_id="s-42")])
    by = {(o.tenant, o.observation_id): o.session_id for o in stored(store)}
    assert by[("demo", "x1")] == by[("demo", "x2")]
    assert by[("demo", "x1")] != by[("other", "x1")]
    # Unrelated, not merely different: the two HMACs share no long common prefix.
    a, b = by[("demo", "x1")].split(":")[1], by[("other", "x1")].split(":")[1]
    assert sum(x == y for x, y in zip(a, b, strict=True)) < 20


def test_key_rotation_uses_the_new_version_and_keeps_old_values_verifiable(env):
    service, store, rings = env
    service.ingest("demo", [item(observation_id="before", session_id="s-1")])
    ring = rings.get("demo")
    rings.put(Keyring("demo", ring.identity.rotated(), ring.ingest))
    service.ingest("demo", [item(observation_id="after", session_id="s-1")])
    by = {o.observation_id: o for o in stored(store)}
    keys = rings.get("demo").identity
    assert by["before"].key_version == "v1"
    assert by["before"].session_id.startswith("v1:")
    assert by["after"].key_version == "v2"
    assert by["after"].session_id.startswith("v2:")
    assert identity.matches("s-1", by["before"].session_id, keys)
    assert identity.matches("s-1", by["after"].session_id, keys)
    assert not identity.matches("s-2", by["before"].session_id, keys)


def test_resent_item_is_accepted_and_changes_nothing(env):
    service, store, _ = env
    first = service.ingest("demo", [item(observation_id="gw-1")])
    again = service.ingest("demo", [item(observation_id="gw-1"), item(observation_id="gw-1")])
    assert first.accepted == 1
    assert again.accepted == 2
    assert len(stored(store)) == 1


def test_item_without_id_gets_a_content_derived_id(env):
    service, store, _ = env
    service.ingest("demo", [item(session_id="s")])
    service.ingest("demo", [item(session_id="s")])
    service.ingest("demo", [item(session_id="s", output_tokens=97)])
    ids = sorted(o.observation_id for o in stored(store))
    assert len(ids) == 2
    assert all(i.startswith("h-") for i in ids)


def test_queue_mode_refuses_raw_identities(env):
    service, store, rings = env
    keys = rings.get("demo").identity
    result = service.ingest("demo", [item(session_id="raw-id"),
                                     item(observation_id="ok",
                                          session_id=identity.pseudonymize("raw-id", keys)),
                                     item(session_id="v9:" + "0" * 64)],
                            identities="pseudonymized")
    assert [(e.index, e.code) for e in result.errors] == [
        (0, "identity_not_pseudonymized"), (2, "unknown_key_version")]
    assert [o.observation_id for o in stored(store)] == ["ok"]


def test_batch_shape_problems_concern_the_whole_request():
    with pytest.raises(InvalidInput) as bad:
        batch_items([item()])
    assert bad.value.field == "items"
    with pytest.raises(PayloadTooLarge):
        batch_items({"items": [item()] * (MAX_BATCH + 1)})
    assert len(batch_items({"items": [item()] * MAX_BATCH})) == MAX_BATCH


def test_imported_items_need_provenance_and_modelled_timing_needs_parameters(env):
    service, _, _ = env
    result = service.ingest("demo", [item(source="imported"),
                                     item(source="imported", provenance="jsonl:sha256:" + "ab" * 32,
                                          timing_source="modeled")])
    assert [(e.field, e.code) for e in result.errors] == [("provenance", "missing"),
                                                          ("timing_model", "missing")]


def test_delete_refuses_a_malformed_deployment_and_parses_before(env):
    service, store, _ = env
    service.ingest("demo", [item(observation_id="a", arrival="2026-11-29T10:00:00Z"),
                            item(observation_id="b", arrival="2026-11-29T12:00:00Z")])
    assert service.delete("demo", "coder-production", parse_time("2026-11-29T11:00:00Z", "before")) == 1
    assert [o.observation_id for o in stored(store)] == ["b"]
    with pytest.raises(InvalidInput):
        service.delete("demo", "bad#name")
    with pytest.raises(InvalidInput):
        parse_time("2026-11-29T11:00:00", "before")


# -- properties ----------------------------------------------------------------------------------

FIELDS = ["observation_id", "deployment", "revision", "arrival", "input_tokens", "output_tokens",
          "cached_input_tokens", "ttft_ms", "latency_ms", "outcome", "streaming", "sampling_rate",
          "source", "provenance", "timing_source", "timing_model", "session_id",
          "parent_session_id", "shared_prefix_id", "prefix_block_ids", "prefix_block_size"]
# Every submitted string carries the canary, so "never echoed" is a plain substring check.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20).map(lambda s: CANARY + s),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5).map(lambda s: CANARY + s), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.dictionaries(st.sampled_from(FIELDS + sorted(BODY_FIELDS) + ["zz_unknown"]),
                             json_values, max_size=6))
def test_schema_fuzz_judges_each_item_alone_and_never_echoes_values(env, extra):
    service, store, _ = env
    before = len(store.items)
    result = service.ingest("demo", [{**item(), **extra}, item(observation_id="anchor")])
    assert result.accepted + result.rejected == 2
    assert result.accepted >= 1  # the valid neighbour is never dragged down
    assert len(store.items) - before <= 2
    assert CANARY not in json.dumps(result.to_document())
    assert all(err.index == 0 for err in result.errors)
    if any(k.lower() in BODY_FIELDS for k in extra):
        assert result.rejected == 1
        assert result.errors[0].code == "body_field_refused"


@settings(max_examples=100, deadline=None)
@given(inp=st.integers(0, 10_000_000), out=st.integers(0, 10_000_000),
       latency=st.floats(0, 86_400_000, allow_nan=False), frac=st.floats(0, 1),
       ms=st.integers(0, 10**9), session=st.text(min_size=1, max_size=50),
       streaming=st.booleans(), outcome=st.sampled_from(["ok", "client_error", "server_error",
                                                          "timeout", "cancelled"]))
def test_valid_items_round_trip_into_the_stored_shape(inp, out, latency, frac, ms, session,
                                                      streaming, outcome):
    store, rings = MemoryStore(), MemoryKeyrings("demo")
    service = CaptureService(store, rings, clock=lambda: NOW)
    arrival_ms = 1_600_000_000_000 + ms
    arrival = datetime.fromtimestamp(arrival_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    result = service.ingest("demo", [item(observation_id=f"p-{ms}", arrival=arrival,
                                          input_tokens=inp, output_tokens=out, latency_ms=latency,
                                          ttft_ms=latency * frac, session_id=session,
                                          streaming=streaming, outcome=outcome)])
    assert result.rejected == 0, result.errors
    obs = store.items[("demo", "coder-production", f"{arrival_ms:013d}#p-{ms}")]
    assert obs.fingerprint is not None
    assert len(obs.fingerprint) == 64  # an HMAC, checked by the id-conflict tests
    assert replace(obs, ingested_at_ms=0, fingerprint=None) == StoredObservation(
        tenant="demo", deployment="coder-production", observation_id=f"p-{ms}",
        arrival_ms=arrival_ms, input_tokens=inp, output_tokens=out, latency_ms=latency,
        outcome=outcome, streaming=streaming, sampling_rate=1.0, source="captured",
        ingested_at_ms=0, ttft_ms=latency * frac,
        session_id=identity.pseudonymize(session, rings.get("demo").identity), key_version="v1")
