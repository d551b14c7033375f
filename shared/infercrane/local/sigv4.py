"""SigV4 verification for the local gateway's IAM-authorized routes (`--admin-auth iam`).

API Gateway checks an `AWS_IAM` route's signature before anything else runs. Locally the gateway
does the same against the one credential pair it issued: it recomputes the signature with
botocore's own signer (so client and server share one implementation of the canonical request)
over what actually arrived — method, path, query, the signed headers and the body — and compares.
It also refuses a request whose `X-Amz-Date` is more than 5 minutes from its clock (SigV4's
replay window) and one whose declared payload hash is not the body's.

Failures answer the way API Gateway classifies them: no signature at all is `signature_required`
(its MISSING_AUTHENTICATION_TOKEN), anything wrong with a signature is `signature_denied`
(INVALID_SIGNATURE / UnrecognizedClientException / "Signature expired").
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.clock import utcnow

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "execute-api"
MAX_SKEW = timedelta(minutes=5)
_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=(?P<cred>[^,\s]+),\s*"
                   r"SignedHeaders=(?P<signed>[a-z0-9;-]+),\s*Signature=(?P<sig>[0-9a-f]{64})$")
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


class SignatureRefused(Exception):
    """An IAM route refused: `code` is `signature_required` or `signature_denied`."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class IamPrincipal:
    access_key_id: str
    secret_access_key: str
    arn: str = "arn:aws:iam::123456789012:user/local-admin"


def new_principal() -> IamPrincipal:
    """A fresh credential pair for one local stack (shown in its ready line)."""
    return IamPrincipal("AKIALOCAL" + secrets.token_hex(6).upper(), secrets.token_urlsafe(30))


@dataclass
class SigV4Verifier:
    principals: list[IamPrincipal]
    region: str
    clock: Callable[[], datetime] = field(default=utcnow)

    def verify(self, method: str, target: str, headers: dict[str, str],
               body: bytes) -> dict[str, Any]:
        """The request context `identity` of a correctly signed request; raises
        `SignatureRefused` otherwise. `headers` have lower-case names."""
        header = headers.get("authorization", "")
        if not header.startswith(ALGORITHM):
            raise SignatureRefused("signature_required",
                                   "This route needs an AWS SigV4 signature (IAM credentials).")
        m = _AUTH.match(header.strip())
        if m is None:
            raise SignatureRefused("signature_denied", "The Authorization header is not a "
                                   "well-formed SigV4 signature.")
        key_id, _, scope = m["cred"].partition("/")
        principal = next((p for p in self.principals if p.access_key_id == key_id), None)
        if principal is None:
            raise SignatureRefused("signature_denied", "The access key in the signature is not "
                                   "recognized.")
        amz_date = headers.get("x-amz-date", "")
        try:
            signed_at = datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=UTC)
        except ValueError:
            raise SignatureRefused("signature_denied", "X-Amz-Date is missing or not "
                                   "YYYYMMDDTHHMMSSZ.") from None
        if abs(self.clock() - signed_at) > MAX_SKEW:
            raise SignatureRefused("signature_denied", "Signature expired: X-Amz-Date is more "
                                   "than 5 minutes from the server's clock.")
        if scope != f"{amz_date[:8]}/{self.region}/{SERVICE}/aws4_request":
            raise SignatureRefused("signature_denied", "The credential scope does not match this "
                                   "API's date, region or service (execute-api).")
        signed = m["signed"].split(";")
        if "host" not in signed or "x-amz-date" not in signed:
            raise SignatureRefused("signature_denied", "The signature must cover the host and "
                                   "x-amz-date headers.")
        declared = headers.get("x-amz-content-sha256")
        if declared is not None and declared != hashlib.sha256(body).hexdigest():
            raise SignatureRefused("signature_denied", "The payload hash does not match the body.")
        expected = self._signature(principal, method, target, headers, signed, body, amz_date)
        if not hmac.compare_digest(expected, m["sig"]):
            raise SignatureRefused("signature_denied", "The request signature does not match "
                                   "(check the credentials, the region and the request body).")
        return {"userArn": principal.arn, "caller": principal.arn.rsplit("/", 1)[-1],
                "accessKey": principal.access_key_id}

    def _signature(self, principal: IamPrincipal, method: str, target: str,
                   headers: dict[str, str], signed: list[str], body: bytes, amz_date: str) -> str:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        host = headers.get("host", "")
        request = AWSRequest(method=method, url=f"http://{host}{target}",
                             headers={name: headers.get(name, "") for name in signed}, data=body)
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(principal.access_key_id, principal.secret_access_key),
                           SERVICE, self.region)
        # The body is hashed here, from the bytes received; a signed x-amz-content-sha256 header
        # was checked against them above.
        canonical = signer.canonical_request(request)
        return str(signer.signature(signer.string_to_sign(request, canonical), request))
