"""moto's KMS, taught one thing real KMS does: `Sign` with `MessageType=DIGEST`.

moto 5 ignores MessageType and hashes the message again, so a signature over a digest (what
securesystemslib's AWSSigner sends, and what KMS signs in AWS) would not verify. The local stack
and the integration tier run moto in-process; `honour_digest_signing()` signs the given digest
as a prehashed value, exactly as KMS documents, and leaves every other call to moto.

Guarded (adapters/library_patches.py): on a moto other than the one it was checked on, moto's own
Sign stays, and a DSSE signature over a digest made locally does not verify (the tests that
verify one skip, saying so).
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

from infercrane.adapters.library_patches import may_patch

PATCH = "moto KMS Sign with MessageType=DIGEST"
LOST = ("Sign hashes the digest again, so a signature over a digest (every DSSE envelope the "
        "functions sign) does not verify locally")
_original: Any = None
_lock = threading.Lock()


def honour_digest_signing() -> bool:
    """Patch moto's KMS Sign (once); True when it is patched."""
    global _original
    with _lock:
        if _original is not None:
            return True
        if not may_patch(PATCH, "moto", LOST):
            return False
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, utils
        from moto.kms.responses import KmsResponse

        original = KmsResponse.sign
        algorithms = {"ECDSA_SHA_256": hashes.SHA256(), "ECDSA_SHA_384": hashes.SHA384(),
                      "ECDSA_SHA_512": hashes.SHA512()}

        def sign(self: Any) -> str:
            if self._get_param("MessageType") != "DIGEST" \
                    or self._get_param("SigningAlgorithm") not in algorithms:
                return str(original(self))
            key_id = self._get_param("KeyId")
            self._validate_key_id(key_id)
            key = self.kms_backend.describe_key(key_id)
            algorithm = self._get_param("SigningAlgorithm")
            if algorithm not in key.signing_algorithms or key.key_usage != "SIGN_VERIFY":
                return str(original(self))  # moto's own validation error
            private = key.private_key.private_key
            signature = private.sign(self._get_param("Message"),
                                     ec.ECDSA(utils.Prehashed(algorithms[algorithm])))
            return json.dumps({"KeyId": key.arn, "SigningAlgorithm": algorithm,
                               "Signature": base64.b64encode(signature).decode()})

        KmsResponse.sign = sign  # type: ignore[method-assign]
        _original = original
        return True


def restore() -> None:
    """moto's own Sign again (tests comparing against it)."""
    global _original
    with _lock:
        if _original is not None:
            from moto.kms.responses import KmsResponse

            KmsResponse.sign = _original  # type: ignore[method-assign]
            _original = None
