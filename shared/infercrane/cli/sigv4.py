"""SigV4 signing of admin requests, for the IAM-authorized admin routes of a deployed stack.

The caller's standard AWS credential chain (environment, shared config/SSO profile, container or
instance role) signs with botocore's own signer for the `execute-api` service. The region is the
one in an `execute-api` endpoint's host name, else AWS_REGION, else the configured region. botocore loads
only when an admin command needs it, so every other command starts fast.
"""

from __future__ import annotations

import os
import re
from typing import Any

from infercrane.cli.client import CliError

SERVICE = "execute-api"
# <api id>.execute-api.<region>.amazonaws.com (also .amazonaws.com.cn and VPC endpoint names).
_EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com")


def region_of(endpoint: str) -> str | None:
    m = _EXECUTE_API_HOST.search(endpoint)
    return m.group(1) if m else None


class SigV4Signer:
    """Signs one request at a time (each signature carries its own X-Amz-Date)."""

    def __init__(self, endpoint: str):
        import botocore.session
        from botocore.exceptions import BotoCoreError

        session = botocore.session.Session()
        try:
            credentials = session.get_credentials()
            # AWS_REGION first, as the other AWS SDKs and the CLI v2 read it.
            region = (region_of(endpoint) or os.environ.get("AWS_REGION")
                      or session.get_config_variable("region"))
        except BotoCoreError as exc:
            raise CliError(f"Cannot load AWS credentials: {exc}", 2) from exc
        if credentials is None:
            raise CliError("Admin commands sign with AWS credentials (SigV4) and none were found: "
                           "configure the AWS credential chain (e.g. AWS_PROFILE), or pass "
                           "--admin-key for a local stack.", 2)
        if not region:
            raise CliError("No AWS region to sign for: set AWS_REGION (the endpoint's host "
                           "does not name one).", 2)
        self._credentials = credentials
        self.region = str(region)

    def __call__(self, method: str, url: str, headers: dict[str, str],
                 data: bytes | None) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, headers=dict(headers), data=data or b"")
        frozen: Any = self._credentials.get_frozen_credentials()  # refreshes expiring roles
        SigV4Auth(frozen, SERVICE, self.region).add_auth(request)
        return {k: str(v) for k, v in request.headers.items()}
