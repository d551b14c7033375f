"""The artifact-cache contract in the domain: expiry, effective state, validation. No I/O: an
in-memory store stands in for the cache table."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain.cache import (
    DEFAULT_TTL_S,
    MAX_FUTURE_S,
    MAX_TTL_S,
    CacheObservation,
    CacheService,
    CacheSweeper,
    expiry,
    validate_location,
)
from infercrane.domain.prefetch import (
    PrefetchService,
    normalize_reason,
    parse_request_id,
    request_id,
)
from infercrane.errors import InvalidInput, NotFound
from infercrane.ports.cache import SweepEntry

DIGEST = "sha256:" + "0f" * 32
T0 = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


class MemoryStore:
    """Just enough of the CacheStore port for the domain's validation and effective reads."""

    def __init__(self) -> None:
        self.current: dict[tuple[str, str, str, str], CacheObservation] = {}
        self.audit: list[tuple[str, CacheObservation]] = []
        self.requests: list[Any] = []

    def put_observation(self, obs: CacheObservation, *, sweep_due: datetime | None) -> bool:
        key = (obs.tenant, obs.model, obs.adapter, obs.location)
        old = self.current.get(key)
        if old is not None and old.observed_at > obs.observed_at:
            return False
        self.current[key] = obs
        return True

    def list_observations(self, tenant: str, model: str, adapter: str | None,
                          location: str | None) -> list[CacheObservation]:
        return [o for (t, m, a, loc), o in self.current.items()
                if t == tenant and m == model and adapter in (None, a) and location in (None, loc)]

    def append_audit(self, obs: CacheObservation, event: str, at: datetime) -> None:
        self.audit.append((event, obs))

    def due(self, kind: str, now: datetime, limit: int) -> list[SweepEntry]:
        return [SweepEntry(kind, "|".join(key), "", "", o.expires_at, o.tenant, "")
                for key, o in self.current.items()
                if kind == "obs" and o.state != "unknown" and o.expires_at <= now][:limit]

    def expire_observation(self, entry: SweepEntry, now: datetime) -> CacheObservation | None:
        key = tuple(entry.pk.split("|"))
        obs = self.current[key]  # type: ignore[index]
        self.current[key] = replace(obs, state="unknown", previous_state=obs.state)  # type: ignore[index]
        return self.current[key]  # type: ignore[index]

    def latest_request(self, tenant: str, key_hash: str) -> Any:
        return None

    def create_request(self, request: Any, key_hash: str, sweep_due: datetime) -> bool:
        self.requests.append(request)
        return True


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, body: dict[str, Any]) -> str:
        self.sent.append(body)
        return str(len(self.sent))


def service(now: datetime = T0) -> tuple[CacheService, MemoryStore, Clock]:
    store, clock = MemoryStore(), Clock(now)
    return CacheService(store, clock), store, clock  # type: ignore[arg-type]


def report(cache: CacheService, observed_at: datetime, ttl: int | None = None,
           evidence: dict[str, str] | None = None, **kw: Any) -> CacheObservation:
    args: dict[str, Any] = {"adapter": "aws", "location": "us-east-1a", "state": "present"}
    args.update(kw)
    return cache.report("demo", DIGEST, args["adapter"], args["location"], args["state"],
                        {"snapshot_id": "snap-1"} if evidence is None else evidence,
                        observed_at, ttl)


def test_twenty_five_hour_ttl_is_clamped_to_twenty_four_hours() -> None:
    cache, _, _ = service()
    obs = report(cache, T0, ttl=25 * 3600)
    assert obs.expires_at - obs.observed_at == timedelta(hours=24)


def test_observation_one_second_past_expiry_reads_unknown() -> None:
    cache, _, clock = service()
    obs = report(cache, T0, ttl=600)
    clock.now = obs.expires_at - timedelta(seconds=1)
    assert [e.state for e in cache.effective("demo", DIGEST)] == ["present"]
    clock.now = obs.expires_at + timedelta(seconds=1)
    [after] = cache.effective("demo", DIGEST)
    assert (after.state, after.unknown_reason) == ("unknown", "expired")
    assert after.document()["reported_state"] == "present"


def test_observation_without_evidence_reads_unknown() -> None:
    cache, _, _ = service()
    report(cache, T0, evidence={})
    [e] = cache.effective("demo", DIGEST)
    assert (e.state, e.unknown_reason) == ("unknown", "no_evidence")


def test_provider_bound_earlier_than_the_ttl_wins() -> None:
    bound = T0 + timedelta(minutes=10)
    assert expiry(T0, 3600, bound) == bound
    assert expiry(T0, 60, bound) == T0 + timedelta(seconds=60)
    assert expiry(T0, None) == T0 + timedelta(seconds=DEFAULT_TTL_S)


def test_other_tenant_reads_nothing() -> None:
    cache, _, _ = service()
    report(cache, T0)
    assert cache.effective("other", DIGEST) == []


@settings(max_examples=200, deadline=None)
@given(ttl=st.integers(min_value=1, max_value=10 * MAX_TTL_S),
       offset=st.integers(min_value=-MAX_FUTURE_S * 10, max_value=MAX_FUTURE_S),
       read_after=st.integers(min_value=-3600, max_value=3 * MAX_TTL_S))
def test_expiry_never_exceeds_a_day_and_expired_never_reads_as_a_hit(
        ttl: int, offset: int, read_after: int) -> None:
    cache, _, clock = service()
    observed = T0 + timedelta(seconds=offset)
    obs = report(cache, observed, ttl=ttl)
    assert obs.expires_at - obs.observed_at == timedelta(seconds=min(ttl, MAX_TTL_S))
    clock.now = observed + timedelta(seconds=read_after)
    [e] = cache.effective("demo", DIGEST)
    if clock.now >= obs.expires_at:
        assert e.state == "unknown"
    else:
        assert e.state == "present"
    assert e.document()["age_s"] >= 0
    assert e.document()["expires_in_s"] >= 0


class NoRequests:
    def redispatch_stuck(self, now: datetime, limit: int) -> tuple[int, int, int]:
        return 0, 0, 0


@settings(max_examples=200, deadline=None)
@given(ttls=st.lists(st.integers(min_value=1, max_value=2 * MAX_TTL_S), min_size=1, max_size=4),
       states=st.lists(st.sampled_from(["present", "prefetching", "missing", "unknown"]),
                       min_size=4, max_size=4),
       sweep_at=st.integers(min_value=0, max_value=3 * MAX_TTL_S),
       read_at=st.integers(min_value=0, max_value=3 * MAX_TTL_S))
def test_sweeping_never_changes_what_a_read_answers(ttls: list[int], states: list[str],
                                                     sweep_at: int, read_at: int) -> None:
    """Whenever the sweep runs (before or after the read time), reads answer the same."""
    read_time = T0 + timedelta(seconds=read_at)
    swept_cache, swept_store, swept_clock = service()
    plain_cache, _, plain_clock = service()
    for i, ttl in enumerate(ttls):
        for cache in (swept_cache, plain_cache):
            report(cache, T0, ttl=ttl, location=f"us-east-1{'abcd'[i]}", state=states[i])
    sweeper = CacheSweeper(swept_store, NoRequests(), swept_clock)  # type: ignore[arg-type]
    sweep_time = T0 + timedelta(seconds=sweep_at)
    if sweep_time <= read_time:
        sweeper.sweep(sweep_time)
    swept_clock.now = plain_clock.now = read_time

    def answer(cache: CacheService) -> list[tuple[str, str]]:
        return [(e.location, e.state) for e in cache.effective("demo", DIGEST)]

    assert answer(swept_cache) == answer(plain_cache)
    assert all(state != "present" for loc, state in answer(swept_cache)
               if read_time >= swept_store.current[("demo", DIGEST, "aws", loc)].expires_at)


@settings(max_examples=100, deadline=None)
@given(ahead=st.integers(min_value=-MAX_TTL_S, max_value=2 * MAX_FUTURE_S))
def test_observations_too_far_in_the_future_are_refused(ahead: int) -> None:
    cache, store, _ = service()
    observed = T0 + timedelta(seconds=ahead)
    if ahead > MAX_FUTURE_S:
        with pytest.raises(InvalidInput) as err:
            report(cache, observed)
        assert err.value.field == "observed_at"
        assert store.current == {}
    else:
        assert report(cache, observed).observed_at == observed


@pytest.mark.parametrize(("kw", "field"), [
    ({"adapter": "azure"}, "adapter"),
    ({"location": "us-central1-a"}, "location"),  # a GCP zone is not an AWS AZ
    ({"adapter": "gcp", "location": "us-east-1a"}, "location"),
    ({"adapter": "kubernetes", "location": "no-namespace"}, "location"),
    ({"adapter": "kubernetes", "location": "c/Bad_NS"}, "location"),
    ({"state": "ready"}, "state"),
    ({"ttl": 0}, "ttl_seconds"),
    ({"evidence": {"1bad": "x"}}, "evidence"),
])
def test_bad_reports_name_the_field_and_store_nothing(kw: dict[str, Any], field: str) -> None:
    cache, store, _ = service()
    with pytest.raises(InvalidInput) as err:
        report(cache, T0, **kw)
    assert err.value.field == field
    assert store.current == {}
    assert store.audit == []


def test_malformed_digest_is_refused_on_read_and_write() -> None:
    cache, store, _ = service()
    with pytest.raises(InvalidInput) as err:
        cache.report("demo", "sha256:ABC", "aws", "us-east-1a", "present", {}, T0)
    assert err.value.field == "model"
    with pytest.raises(InvalidInput) as err:
        cache.effective("demo", "md5:" + "0" * 32)
    assert err.value.field == "model_digest"
    assert store.current == {}


@pytest.mark.parametrize(("adapter", "location"), [
    ("aws", "us-east-1a"), ("aws", "eu-central-1b"), ("aws", "us-gov-west-1a"),
    ("aws", "us-west-2-lax-1a"), ("gcp", "us-central1-a"), ("gcp", "europe-west4-b"),
    ("gcp", "northamerica-northeast1-c"), ("kubernetes", "prod-eks/models"),
    ("kubernetes", "gke_proj_us-central1_c1/default"),
])
def test_provider_location_formats_are_accepted(adapter: str, location: str) -> None:
    assert validate_location(adapter, location) == location


@pytest.mark.parametrize(("kw", "field"), [
    ({"adapter": "azure"}, "adapter"),
    ({"model": "sha256:short"}, "model"),
    ({"location": "us-east-1"}, "location"),
    ({"source": ""}, "source"),
    ({"source": "has space"}, "source"),
])
def test_bad_prefetch_requests_name_the_field_and_send_nothing(kw: dict[str, Any],
                                                               field: str) -> None:
    store, queue = MemoryStore(), Recorder()
    prefetch = PrefetchService(store, queue, {}, Clock(T0))  # type: ignore[arg-type]
    args = {"model": DIGEST, "adapter": "aws", "location": "us-east-1a", "source": "snap-1"}
    args.update(kw)
    with pytest.raises(InvalidInput) as err:
        prefetch.request("demo", args["model"], args["adapter"], args["location"], args["source"])
    assert err.value.field == field
    assert store.requests == []
    assert queue.sent == []


def test_new_request_is_persisted_before_it_is_enqueued() -> None:
    store, queue = MemoryStore(), Recorder()
    order: list[str] = []
    original = store.create_request

    def create(*a: Any, **k: Any) -> bool:
        order.append("persist")
        return original(*a, **k)

    def send(body: dict[str, Any]) -> str:
        order.append("enqueue")
        return "1"

    store.create_request = create  # type: ignore[method-assign]
    queue.send = send  # type: ignore[method-assign]
    prefetch = PrefetchService(store, queue, {}, Clock(T0))  # type: ignore[arg-type]
    req, created = prefetch.request("demo", DIGEST, "aws", "us-east-1a", "snap-1")
    assert created
    assert order == ["persist", "enqueue"]
    assert req.status == "accepted"


@given(key=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
       attempt=st.integers(min_value=1, max_value=999_999))
def test_request_ids_round_trip(key: str, attempt: int) -> None:
    ref = parse_request_id("demo", request_id(key, attempt))
    assert (ref.key_hash, ref.attempt, ref.id) == (key, attempt, request_id(key, attempt))


@pytest.mark.parametrize("bad", ["", "pf_", "pf_xyz_1", "pf_" + "0" * 32 + "_0", "../etc"])
def test_malformed_request_ids_are_not_found(bad: str) -> None:
    with pytest.raises(NotFound):
        parse_request_id("demo", bad)


@given(st.text(max_size=200))
def test_failure_reasons_normalize_to_short_codes(text: str) -> None:
    code = normalize_reason(text)
    assert 1 <= len(code) <= 64
    assert code[0].isalpha()
    assert all(c.isalnum() or c == "_" for c in code)
    assert code.isascii()
