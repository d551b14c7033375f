"""Every route × {no key, unknown key, revoked key} is a 401 that touches nothing; admin routes
refuse tenant keys; a valid key asking for another tenant's resource gets a 404."""

from __future__ import annotations

import re

import pytest
import requests

from infercrane.local.template import load
from tests.conftest import REPO

TEMPLATE = load(REPO / "template.yaml")
TENANT_ROUTES = [r for r in TEMPLATE.routes if r.auth == "default"]
ADMIN_ROUTES = [r for r in TEMPLATE.routes if r.auth == "AWS_IAM"]
SAMPLE = {"digest": "sha256:" + "0" * 64, "model_digest": "sha256:" + "0" * 64, "id": "x",
          "deployment": "coder-production", "revision": "candidate", "tenant": "demo",
          "key_id": "000000000000", "queue": "capture", "key": "resource_id",
          "build_id": "0" * 32}


def concrete(path: str) -> str:
    return re.sub(r"\{([a-z_]+)\}", lambda m: SAMPLE[m.group(1)], path)


def table_counts(served) -> dict[str, int]:
    """Items per table. DescribeTable's ItemCount, which the local stack's moto counts live (AWS
    refreshes it only every few hours): a Scan read every item the other tests of this worker had
    stored (thousands of imported observations) twice per route, most of this module's time."""
    ddb = served.aws("dynamodb")
    return {t: ddb.describe_table(TableName=t)["Table"]["ItemCount"]
            for t in ddb.list_tables()["TableNames"]}


@pytest.fixture(scope="module")
def revoked_key(served) -> str:
    created = served.cli_json("admin", "key", "create", "demo", tenant=None)
    served.cli_json("admin", "key", "revoke", "demo", created["key_id"], tenant=None)
    return created["api_key"]


@pytest.mark.parametrize("route", TENANT_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_tenant_routes_refuse_missing_unknown_and_revoked_keys(served, revoked_key, route):
    before = table_counts(served)
    unknown = "ick_0123456789ab_" + "A" * 43
    for header in ({}, {"Authorization": f"Bearer {unknown}"},
                   {"Authorization": f"Bearer {revoked_key}"}, {"Authorization": unknown}):
        r = requests.request(route.method, served.endpoint + concrete(route.path), headers=header,
                             json={"items": []}, timeout=30)
        assert r.status_code == 401, (header, r.text)
        assert r.json()["error"]["code"] == "unauthorized"
    assert table_counts(served) == before


@pytest.mark.parametrize("route", ADMIN_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_admin_routes_refuse_tenant_keys(served, route):
    r = requests.request(route.method, served.endpoint + concrete(route.path),
                         headers={"Authorization": f"Bearer {served.tenants['demo']}"},
                         json={"name": "intruder"}, timeout=30)
    assert r.status_code == 403


def test_revoked_key_is_refused_through_the_cli(served, revoked_key):
    env_key = {"INFERCRANE_API_KEY": revoked_key}
    done = served.cli("cache", "status", "--model", SAMPLE["digest"], "--api-key",
                      env_key["INFERCRANE_API_KEY"], tenant=None)
    assert done.returncode == 1 and "Unauthorized" in done.stderr
