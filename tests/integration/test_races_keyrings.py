"""HMAC keyring rotation is a read-modify-write of one secret: concurrent rotations (of one
purpose or of both) and a crash at every write must never lose or delete a version.

Each rotating "environment" has its own store (its own keyring cache, as a warm Lambda has) over
the same Secrets Manager (moto's server)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from infercrane.adapters.secrets_manager import SecretsManagerKeyringStore
from infercrane.domain.tenancy import TenancyService
from infercrane.errors import Conflict
from tests.support.faults import Crash
from tests.support.faults import crash_after as fault_after

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def environment(aws, fault=None) -> TenancyService:
    store = SecretsManagerKeyringStore(aws.client("secretsmanager"), aws.settings.secret_prefix)
    store.fault_after_write = fault
    return TenancyService(aws.container.directory, store)


def stored_ring(aws, tenant: str = "acme") -> dict:
    raw = aws.client("secretsmanager").get_secret_value(
        SecretId=f"{aws.settings.secret_prefix}/tenants/{tenant}")["SecretString"]
    return json.loads(raw)


def rotate_concurrently(aws, purposes: list[str]) -> list[str]:
    envs = [environment(aws) for _ in purposes]
    with ThreadPoolExecutor(len(purposes)) as pool:
        return list(pool.map(lambda ep: ep[0].rotate_hmac_keys("acme", ep[1]),
                             zip(envs, purposes, strict=True)))


def test_concurrent_rotations_answer_distinct_consecutive_versions_and_keep_every_one(aws):
    aws.container.tenancy.create_tenant("acme", NOW)
    v1 = stored_ring(aws)["identity"]["keys"]["v1"]
    answers = rotate_concurrently(aws, ["identity"] * 6)
    assert sorted(answers, key=lambda v: int(v[1:])) == [f"v{n}" for n in range(2, 8)]
    identity = stored_ring(aws)["identity"]
    assert set(identity["keys"]) == {f"v{n}" for n in range(1, 8)}
    assert identity["current"] == "v7"
    assert identity["keys"]["v1"] == v1  # an old key is never replaced


def test_identity_and_ingest_rotations_at_once_lose_neither_ring(aws):
    aws.container.tenancy.create_tenant("acme", NOW)
    answers = rotate_concurrently(aws, ["identity", "ingest"] * 4)
    ring = stored_ring(aws)
    for purpose in ("identity", "ingest"):
        assert sorted(a for a, p in zip(answers, ["identity", "ingest"] * 4, strict=True)
                      if p == purpose) == ["v2", "v3", "v4", "v5"]
        assert set(ring[purpose]["keys"]) == {"v1", "v2", "v3", "v4", "v5"}
        assert ring[purpose]["current"] == "v5"


@pytest.mark.parametrize("crash_after", [1, 2])
def test_a_rotation_killed_after_any_write_leaves_a_whole_ring_and_the_next_one_continues(
        aws, crash_after):
    aws.container.tenancy.create_tenant("acme", NOW)
    aws.container.tenancy.rotate_hmac_keys("acme", "identity")
    before = stored_ring(aws)["identity"]
    with pytest.raises(Crash):
        environment(aws, fault_after(crash_after)).rotate_hmac_keys("acme", "identity")
    after = stored_ring(aws)["identity"]
    # Either the rotation happened whole or not at all; no version was lost either way.
    assert after["keys"].items() >= before["keys"].items()
    assert after["current"] in after["keys"]
    assert set(after["keys"]) in ({"v1", "v2"}, {"v1", "v2", "v3"})
    following = f"v{len(after['keys']) + 1}"
    assert environment(aws).rotate_hmac_keys("acme", "identity") == following
    assert set(stored_ring(aws)["identity"]["keys"]) == {f"v{n}" for n in
                                                          range(1, len(after["keys"]) + 2)}


def test_a_tenant_creation_killed_after_its_keyring_is_completed_by_the_next_attempt(aws):
    def fault() -> None:
        raise Crash

    with pytest.raises(Crash):
        environment(aws, fault).create_tenant("acme", NOW)
    ring = stored_ring(aws)
    assert not aws.container.directory.tenant_exists("acme")
    issued = environment(aws).create_tenant("acme", NOW)
    assert stored_ring(aws) == ring  # the keyring left behind is the tenant's, not replaced
    assert environment(aws).authenticate(issued.raw_key).tenant == "acme"
    assert environment(aws).rotate_hmac_keys("acme", "ingest") == "v2"


def test_concurrent_creations_of_one_tenant_make_one_tenant_with_one_keyring(aws):
    envs = [environment(aws) for _ in range(4)]

    def create(env: TenancyService) -> str:
        try:
            return env.create_tenant("acme", NOW).tenant
        except Conflict:
            return "conflict"

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(create, envs))
    assert sorted(answers) == ["acme", "conflict", "conflict", "conflict"]
    secrets = aws.client("secretsmanager").list_secrets()["SecretList"]
    assert len(secrets) == 1 and set(stored_ring(aws)["identity"]["keys"]) == {"v1"}
