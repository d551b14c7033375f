from __future__ import annotations

from datetime import UTC, datetime

import pytest

from infercrane.domain.tenancy import (
    ApiKeyRecord,
    Keyring,
    KeySet,
    TenancyService,
    hash_api_key,
    validate_tenant_name,
)
from infercrane.errors import Conflict, InvalidInput, NotFound, Unauthorized

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class MemoryDirectory:
    def __init__(self) -> None:
        self.tenants: set[str] = set()
        self.keys: dict[str, ApiKeyRecord] = {}

    def create_tenant(self, tenant, now):
        if tenant in self.tenants:
            raise Conflict("exists", field="name")
        self.tenants.add(tenant)

    def tenant_exists(self, tenant):
        return tenant in self.tenants

    def put_api_key(self, record):
        self.keys[record.key_hash] = record

    def find_api_key(self, key_hash):
        return self.keys.get(key_hash)

    def revoke_api_key(self, tenant, key_id, now):
        for h, r in self.keys.items():
            if r.tenant == tenant and r.key_id == key_id:
                self.keys[h] = ApiKeyRecord(r.tenant, r.key_id, r.key_hash, r.created_at, now)
                return
        raise NotFound("no key", field="key_id")


class MemoryKeyrings:
    def __init__(self) -> None:
        self.rings: dict[str, Keyring] = {}

    def create(self, keyring):
        self.rings[keyring.tenant] = keyring

    def get(self, tenant):
        return self.rings[tenant]

    def update(self, tenant, change):
        self.rings[tenant] = change(self.rings[tenant])
        return self.rings[tenant]


@pytest.fixture
def tenancy():
    return TenancyService(MemoryDirectory(), MemoryKeyrings())


def test_an_issued_key_authenticates_as_its_tenant_and_only_its_hash_is_stored(tenancy):
    issued = tenancy.create_tenant("acme", NOW)
    assert tenancy.authenticate(issued.raw_key).tenant == "acme"
    stored = tenancy._directory.keys
    assert issued.raw_key not in str(stored)
    assert hash_api_key(issued.raw_key) in stored


@pytest.mark.parametrize("key", [None, "", "Bearer", "ick_nothex_short", "x" * 80])
def test_malformed_keys_are_unauthorized(tenancy, key):
    with pytest.raises(Unauthorized):
        tenancy.authenticate(key)


def test_a_revoked_key_is_unauthorized_and_other_keys_still_work(tenancy):
    first = tenancy.create_tenant("acme", NOW)
    second = tenancy.create_api_key("acme", NOW)
    tenancy.revoke_api_key("acme", first.key_id, NOW)
    with pytest.raises(Unauthorized):
        tenancy.authenticate(first.raw_key)
    assert tenancy.authenticate(second.raw_key).key_id == second.key_id


def test_rotation_adds_a_version_and_keeps_old_ones_for_verification(tenancy):
    tenancy.create_tenant("acme", NOW)
    before = tenancy._keyrings.get("acme").identity
    assert tenancy.rotate_hmac_keys("acme") == "v2"
    after = tenancy._keyrings.get("acme").identity
    assert after.current == "v2"
    assert after.key("v1") == before.key("v1")
    assert after.key("v2") != before.key("v1")


def test_keysets_round_trip_through_json():
    ks = KeySet.fresh().rotated()
    assert KeySet.from_document(ks.to_document()) == ks


@pytest.mark.parametrize("name", ["", "A", "acme_corp", "-acme", "acme-", "a" * 64, "acme#x"])
def test_tenant_names_are_validated_with_the_field_named(name):
    with pytest.raises(InvalidInput) as info:
        validate_tenant_name(name, field="name")
    assert info.value.field == "name"


def test_a_tenant_cannot_be_created_twice(tenancy):
    tenancy.create_tenant("acme", NOW)
    with pytest.raises(Conflict):
        tenancy.create_tenant("acme", NOW)
