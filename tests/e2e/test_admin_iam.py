"""The README's bootstrap as an operator runs it against a deployed stack: `infercrane admin
tenant create` signed with SigV4 from the standard AWS credential chain, against a local stack
whose admin routes (like API Gateway's AWS_IAM routes) accept nothing else."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.conftest import BIN, Served, serving


@pytest.fixture(scope="module")
def iam_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("iam")
    with serving(tmp, "--admin-auth", "iam", "--no-schedules") as stack:
        yield stack, json.loads((tmp / "ready.json").read_text())


def operator(endpoint: str, credentials: dict[str, str] | None, *args: str,
             tmp: Path) -> subprocess.CompletedProcess[str]:
    """The CLI with only an endpoint and (maybe) AWS credentials: no admin key anywhere."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "INFERCRANE_"))}
    env.update({"INFERCRANE_ENDPOINT": endpoint, "NO_COLOR": "1",
                # No shared config/credentials files and no instance metadata: only what we give.
                "AWS_CONFIG_FILE": str(tmp / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "none"),
                "AWS_EC2_METADATA_DISABLED": "true"})
    if credentials:
        env.update({"AWS_ACCESS_KEY_ID": credentials["access_key_id"],
                    "AWS_SECRET_ACCESS_KEY": credentials["secret_access_key"],
                    "AWS_REGION": credentials["region"]})
    return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_admin_tenant_create_signed_with_sigv4_creates_a_working_tenant(iam_stack, tmp_path):
    stack, doc = iam_stack
    assert doc["admin_auth"] == "iam"
    done = operator(stack.endpoint, doc["admin_credentials"], "admin", "tenant", "create",
                    "acme", "--output", "json", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert created["tenant"] == "acme"
    # The key it printed works on the tenant API.
    r = requests.get(f"{stack.endpoint}/v1/prefetch-requests/pf_{'0' * 32}_1",
                     headers={"Authorization": f"Bearer {created['api_key']}"}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_admin_commands_without_a_signature_are_refused_with_signature_required(iam_stack, tmp_path):
    stack, doc = iam_stack
    # No AWS credentials at all: the CLI says what it needs before sending anything.
    done = operator(stack.endpoint, None, "admin", "tenant", "create", "nosig", tmp=tmp_path)
    assert done.returncode == 2
    assert "AWS credentials" in done.stderr and "--admin-key" in done.stderr
    # The CLI with the stack's admin key sends a bearer key, not a signature: refused.
    done = subprocess.run([str(BIN), "admin", "tenant", "create", "nosig", "--endpoint",
                           stack.endpoint, "--admin-key", doc["admin_key"]],
                          env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("error: This route needs an AWS SigV4 signature")
    # Over HTTP without a signature, or with the admin key (not accepted in IAM mode): 403.
    for headers in ({}, {"Authorization": f"Bearer {doc['admin_key']}"}):
        r = requests.post(f"{stack.endpoint}/v1/admin/tenants", json={"name": "nosig"},
                          headers=headers, timeout=30)
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "signature_required"


def test_wrong_aws_credentials_are_refused_with_signature_denied(iam_stack, tmp_path):
    stack, doc = iam_stack
    wrong = {**doc["admin_credentials"], "secret_access_key": "not-the-secret"}
    done = operator(stack.endpoint, wrong, "admin", "tenant", "create", "denied", tmp=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: The request signature does not match")
    # Nothing was created: the right credentials can still create that name.
    done = operator(stack.endpoint, doc["admin_credentials"], "admin", "tenant", "create",
                    "denied", "--output", "json", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
