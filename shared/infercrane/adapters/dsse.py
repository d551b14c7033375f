"""DSSE envelopes with securesystemslib: signing with the service's KMS key, and verifying.

`KmsEvidenceSigner` implements `ports.signing.EvidenceSigner` with securesystemslib's `AWSSigner`
(it hashes locally and asks KMS to sign the SHA-256 digest: kms:Sign with MessageType DIGEST) and
`securesystemslib.dsse.Envelope`. `verify_envelope` is what `infercrane trace verify` runs on a
workstation with the service's public key (PEM).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_der_public_key,
    load_pem_public_key,
)
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import AWSSigner, Signer, SSlibKey

from infercrane.domain.attestation import PAYLOAD_TYPE, SIGNING_SCHEME
from infercrane.errors import DependencyUnavailable, InvalidInput


class _InjectedAwsSigner(AWSSigner):
    """AWSSigner with the container's KMS client (endpoint, region, retries) instead of one it
    would build from ambient configuration; its signing (local hash, KMS Sign) is unchanged."""

    def __init__(self, client: Any, aws_key_id: str, public_key: SSlibKey):
        self.aws_key_id = aws_key_id
        self._public_key = public_key
        self.client = client
        self.aws_algo = self.aws_algos[public_key.scheme]


def public_key_from_pem(pem: str) -> SSlibKey:
    try:
        key = load_pem_public_key(pem.encode("utf-8"))
        return SSlibKey.from_crypto(key, scheme=SIGNING_SCHEME)
    except (ValueError, TypeError) as exc:
        raise InvalidInput("The public key is not an ECDSA P-256 PEM public key.",
                           field="public_key") from exc


def sign_statement(signer: Signer, statement: Mapping[str, Any]) -> dict[str, Any]:
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(signer)
    signed: dict[str, Any] = envelope.to_dict()
    return signed


class KmsEvidenceSigner:
    """The service's signer: one asymmetric KMS key (ECC_NIST_P256, SIGN_VERIFY) per deployment."""

    def __init__(self, client: Any, key_id: str):
        self._client = client
        self._key_id = key_id
        self._signer: _InjectedAwsSigner | None = None
        self._lock = threading.Lock()

    def _aws_signer(self) -> _InjectedAwsSigner:
        with self._lock:
            if self._signer is None:
                try:
                    der = self._client.get_public_key(KeyId=self._key_id)["PublicKey"]
                except (BotoCoreError, ClientError) as exc:
                    raise DependencyUnavailable("The signing key is unavailable.") from exc
                key = SSlibKey.from_crypto(load_der_public_key(der), scheme=SIGNING_SCHEME)
                self._signer = _InjectedAwsSigner(self._client, self._key_id, key)
            return self._signer

    def sign(self, statement: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return sign_statement(self._aws_signer(), statement)
        except (BotoCoreError, ClientError) as exc:
            raise DependencyUnavailable("The signing key is unavailable.") from exc

    def public_key_pem(self) -> str:
        return str(self._aws_signer().public_key.keyval["public"])

    def key_id(self) -> str:
        return self._aws_signer().public_key.keyid


def pem_of(key: SSlibKey) -> str:
    pem = load_pem_public_key(str(key.keyval["public"]).encode())
    return pem.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


def verify_envelope(envelope: Mapping[str, Any], public_key_pem: str) -> dict[str, Any]:
    """The signed statement, once the envelope's signature verifies with the key; else
    `InvalidInput` saying why (not an envelope, another payload type, a bad signature)."""
    key = public_key_from_pem(public_key_pem)
    try:
        parsed = Envelope.from_dict(json.loads(json.dumps(envelope)))  # from_dict edits its input
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput("The attestation is not a DSSE envelope.", field="attestation") from exc
    if parsed.payload_type != PAYLOAD_TYPE:
        raise InvalidInput("The envelope does not carry an in-toto statement.",
                           field="attestation")
    try:
        parsed.verify([key], 1)
    except (VerificationError, ValueError) as exc:
        raise InvalidInput("The signature does not verify with this public key (signed by "
                           "another key, or the envelope was changed).",
                           field="attestation") from exc
    try:
        statement: dict[str, Any] = json.loads(parsed.payload)
    except ValueError as exc:
        raise InvalidInput("The signed payload is not JSON.", field="attestation") from exc
    if not isinstance(statement, dict):
        raise InvalidInput("The signed payload is not a statement.", field="attestation")
    return statement
