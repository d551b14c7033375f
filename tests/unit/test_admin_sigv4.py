"""Admin requests signed by the CLI (SigV4, botocore's signer) and checked by the local gateway's
verifier: what is accepted, and what is refused with which code."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest

from infercrane.cli.client import CliError
from infercrane.cli.sigv4 import SigV4Signer, region_of
from infercrane.local.sigv4 import IamPrincipal, SignatureRefused, SigV4Verifier

ENDPOINT = "http://127.0.0.1:8123"
PRINCIPAL = IamPrincipal("AKIATESTADMIN", "s3cr3t-admin-secret")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE",
                 "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", PRINCIPAL.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PRINCIPAL.secret_access_key)
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def signed(path: str = "/v1/admin/tenants", body: bytes | None = b'{"name": "acme"}',
           method: str = "POST") -> tuple[str, dict[str, str], bytes]:
    """What the gateway receives: target, lower-case headers (Host as urllib sends it), body."""
    url = ENDPOINT + path
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    out = SigV4Signer(ENDPOINT)(method, url, headers, body)
    received = {k.lower(): v for k, v in out.items()}
    received["host"] = urlsplit(url).netloc
    received["user-agent"] = "Python-urllib/3"  # unsigned headers may be added on the way
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else ""), received, body or b""


def verifier(skew: timedelta = timedelta(0)) -> SigV4Verifier:
    return SigV4Verifier([PRINCIPAL], "us-east-1", clock=lambda: datetime.now(UTC) + skew)


def test_a_cli_signed_admin_request_is_accepted_with_the_caller_identity(aws_env: None) -> None:
    target, headers, body = signed("/v1/admin/dlqs/capture?limit=5", None, "GET")
    identity = verifier().verify("GET", target, headers, body)
    assert identity["accessKey"] == PRINCIPAL.access_key_id
    assert identity["userArn"].startswith("arn:aws:iam::")


def test_an_unsigned_request_needs_a_signature(aws_env: None) -> None:
    for auth in ("", "Bearer icadmin_x"):
        with pytest.raises(SignatureRefused) as refused:
            verifier().verify("POST", "/v1/admin/tenants", {"authorization": auth}, b"{}")
        assert refused.value.code == "signature_required"


@pytest.mark.parametrize("tamper", ["body", "path", "query", "method", "signed_header"])
def test_a_request_changed_after_signing_is_denied(aws_env: None, tamper: str) -> None:
    target, headers, body = signed("/v1/admin/tenants?x=1")
    method = "POST"
    if tamper == "body":
        body = json.dumps({"name": "mallory"}).encode()
    elif tamper == "path":
        target = "/v1/admin/tenants/acme/api-keys?x=1"
    elif tamper == "query":
        target = "/v1/admin/tenants?x=2"
    elif tamper == "method":
        method = "PUT"
    else:
        headers["content-type"] = "text/plain"
    with pytest.raises(SignatureRefused) as refused:
        verifier().verify(method, target, headers, body)
    assert refused.value.code == "signature_denied"
    assert "does not match" in refused.value.message


def test_a_signature_older_or_newer_than_five_minutes_is_expired(aws_env: None) -> None:
    target, headers, body = signed()
    assert verifier(timedelta(minutes=4)).verify("POST", target, headers, body)
    for skew in (timedelta(minutes=6), -timedelta(minutes=6)):
        with pytest.raises(SignatureRefused, match="expired"):
            verifier(skew).verify("POST", target, headers, body)


def test_a_declared_payload_hash_must_be_the_bodys(aws_env: None) -> None:
    target, headers, body = signed()
    headers["x-amz-content-sha256"] = "0" * 64
    with pytest.raises(SignatureRefused, match="payload hash"):
        verifier().verify("POST", target, headers, body)


def test_unknown_keys_wrong_secrets_and_other_regions_are_denied(
        aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    target, headers, body = signed()
    other = SigV4Verifier([IamPrincipal("AKIAOTHER", "x")], "us-east-1")
    with pytest.raises(SignatureRefused, match="not recognized"):
        other.verify("POST", target, headers, body)
    wrong_secret = SigV4Verifier([IamPrincipal(PRINCIPAL.access_key_id, "guess")], "us-east-1")
    with pytest.raises(SignatureRefused, match="does not match"):
        wrong_secret.verify("POST", target, headers, body)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    target, headers, body = signed()
    with pytest.raises(SignatureRefused, match="scope"):
        verifier().verify("POST", target, headers, body)


def test_the_signing_region_comes_from_an_execute_api_host_first() -> None:
    assert region_of("https://abc123.execute-api.eu-central-1.amazonaws.com/prod") == "eu-central-1"
    assert region_of("http://127.0.0.1:8080") is None


def test_missing_credentials_are_a_usage_error_that_says_what_to_do(
        aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    with pytest.raises(CliError) as err:
        SigV4Signer(ENDPOINT)
    assert err.value.exit_code == 2 and "--admin-key" in err.value.message
