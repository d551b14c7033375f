"""Stored evidence is signed by the stack's KMS key (moto's KMS): traces, execution evidence and
AIPerf exports each come with a DSSE envelope whose in-toto statement names their digest."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from infercrane.adapters.dsse import verify_envelope
from infercrane.cli.client import CliError
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.attestation import (
    PREDICATE_AIPERF_EXPORT,
    PREDICATE_EXECUTION,
    PREDICATE_TRACE,
    STATEMENT_TYPE,
)
from infercrane.errors import InvalidInput
from tests.integration.test_execution_routes import evidence
from tests.integration.test_trace_routes import stored
from tests.support.execution import InProcessApi

BUILD = {"deployment": "coder-production", "window": "24h", "until": "2026-11-29T20:00:00Z"}


def other_key_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


def test_the_template_declares_one_p256_signing_key_and_moto_holds_it(aws: Any) -> None:
    # The other keys (the alarm topic's) are symmetric encryption keys: exactly one key signs.
    keys = aws.template.of_type("AWS::KMS::Key")
    signing = [k["Properties"] for k in keys.values() if k["Properties"].get("KeyUsage") == "SIGN_VERIFY"]
    assert [k["KeySpec"] for k in signing] == ["ECC_NIST_P256"]
    meta = aws.client("kms").describe_key(KeyId=aws.settings.signing_key_id)["KeyMetadata"]
    assert meta["KeySpec"] == "ECC_NIST_P256"


def test_a_built_trace_is_signed_and_its_statement_names_its_digest(aws: Any) -> None:
    aws.container.observations.put_many([stored(i) for i in range(5)])
    acme = InProcessApi("acme")
    header = acme.request("POST", "/v1/traces", BUILD)
    envelope = acme.request("GET", f"/v1/traces/{header['digest']}/attestation")
    pem = acme.request("GET", "/v1/signing-key")["public_key_pem"]

    statement = verify_envelope(envelope, pem)
    assert statement["_type"] == STATEMENT_TYPE
    assert statement["predicateType"] == PREDICATE_TRACE
    assert statement["subject"][0]["digest"]["sha256"] == header["digest"].removeprefix("sha256:")
    assert statement["predicate"]["evidence_class"] == header["evidence_class"]
    document = acme.request("GET", f"/v1/traces/{header['digest']}/document")
    assert statement["predicate"]["blocks"] == {
        name: hashlib.sha256(rfc8785.dumps(value)).hexdigest()
        for name, value in document.items() if name != "digest"}
    with pytest.raises(InvalidInput):
        verify_envelope(envelope, other_key_pem())
    with pytest.raises(CliError) as other:
        InProcessApi("other").request("GET", f"/v1/traces/{header['digest']}/attestation")
    assert other.value.exit_code == 4


def test_kms_signatures_verify_with_the_public_key_kms_reports(aws: Any) -> None:
    # The same envelope checked by KMS itself (RAW message = the DSSE PAE bytes).
    aws.container.observations.put_many([stored(i) for i in range(3)])
    acme = InProcessApi("acme")
    header = acme.request("POST", "/v1/traces", BUILD)
    envelope = acme.request("GET", f"/v1/traces/{header['digest']}/attestation")
    import base64

    payload = base64.b64decode(envelope["payload"])
    ptype = envelope["payloadType"].encode()
    pae = b"DSSEv1 %d %b %d %b" % (len(ptype), ptype, len(payload), payload)
    answer = aws.client("kms").verify(
        KeyId=aws.settings.signing_key_id, Message=pae, MessageType="RAW",
        Signature=base64.b64decode(envelope["signatures"][0]["sig"]),
        SigningAlgorithm="ECDSA_SHA_256")
    assert answer["SignatureValid"] is True


def test_recorded_execution_evidence_is_signed(aws: Any) -> None:
    acme = InProcessApi("acme")
    doc = evidence()
    acme.request("POST", "/v1/executions", doc)
    envelope = acme.request("GET", f"/v1/executions/{doc['execution_id']}/attestation")
    statement = verify_envelope(envelope, acme.request("GET", "/v1/signing-key")["public_key_pem"])
    assert statement["predicateType"] == PREDICATE_EXECUTION
    assert statement["subject"][0]["digest"]["sha256"] == doc["digest"].removeprefix("sha256:")
    # Every block of the stored evidence is signed, the build block the digest leaves out too.
    stored_doc = acme.request("GET", f"/v1/executions/{doc['execution_id']}")
    assert statement["predicate"]["blocks"] == {
        name: hashlib.sha256(rfc8785.dumps(value)).hexdigest()
        for name, value in stored_doc.items() if name != "digest"}
    assert "build" in statement["predicate"]["blocks"]


def test_an_aiperf_export_attestation_names_the_exported_bytes(aws: Any) -> None:
    aws.container.observations.put_many([stored(i) for i in range(4)])
    acme = InProcessApi("acme")
    header = acme.request("POST", "/v1/traces", BUILD)
    document = acme.request("GET", f"/v1/traces/{header['digest']}/document")
    envelope = acme.request("GET", f"/v1/traces/{header['digest']}/aiperf-attestation",
                            params={"name": "t.jsonl"})
    statement = verify_envelope(envelope, acme.request("GET", "/v1/signing-key")["public_key_pem"])
    body = mooncake_jsonl(document).encode()
    assert statement["predicateType"] == PREDICATE_AIPERF_EXPORT
    assert statement["subject"] == [{"name": "t.jsonl",
                                     "digest": {"sha256": hashlib.sha256(body).hexdigest()}}]


def test_another_tenant_gets_404_for_an_export_attestation_even_without_a_name(aws: Any) -> None:
    aws.container.observations.put_many([stored(i) for i in range(2)])
    header = InProcessApi("acme").request("POST", "/v1/traces", BUILD)
    with pytest.raises(CliError) as other:
        InProcessApi("other").request("GET", f"/v1/traces/{header['digest']}/aiperf-attestation")
    assert other.value.exit_code == 4
