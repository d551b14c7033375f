from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from infercrane.errors import Conflict, NotFound, Unauthorized

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_tenant_keys_live_in_dynamodb_only_as_hashes(aws):
    issued = aws.container.tenancy.create_tenant("acme", NOW)
    items = aws.client("dynamodb").scan(TableName=aws.settings.directory_table)["Items"]
    assert len(items) == 3  # tenant, key listing, key lookup
    assert issued.raw_key not in json.dumps(items)
    assert aws.container.tenancy.authenticate(issued.raw_key).tenant == "acme"


def test_revocation_takes_effect_on_the_next_lookup(aws):
    tenancy = aws.container.tenancy
    issued = tenancy.create_tenant("acme", NOW)
    tenancy.revoke_api_key("acme", issued.key_id, NOW)
    with pytest.raises(Unauthorized):
        tenancy.authenticate(issued.raw_key)
    with pytest.raises(NotFound):
        tenancy.revoke_api_key("acme", "000000000000", NOW)


def test_a_duplicate_tenant_is_a_conflict_and_creates_no_second_keyring(aws):
    aws.container.tenancy.create_tenant("acme", NOW)
    with pytest.raises(Conflict):
        aws.container.tenancy.create_tenant("acme", NOW)
    secrets = aws.client("secretsmanager").list_secrets()["SecretList"]
    assert [s["Name"] for s in secrets] == [f"{aws.settings.secret_prefix}/tenants/acme"]


def test_rotation_is_persisted_in_secrets_manager_and_keeps_old_versions(aws):
    tenancy = aws.container.tenancy
    tenancy.create_tenant("acme", NOW)
    tenancy.rotate_hmac_keys("acme")
    raw = aws.client("secretsmanager").get_secret_value(
        SecretId=f"{aws.settings.secret_prefix}/tenants/acme")["SecretString"]
    identity = json.loads(raw)["identity"]
    assert identity["current"] == "v2" and set(identity["keys"]) == {"v1", "v2"}
