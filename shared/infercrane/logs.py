"""Which library loggers may never log below WARNING, whatever level the caller chooses.

At DEBUG these libraries log request and response payloads (botocore's wire log and response
parser, pynamodb's call arguments, urllib3's connection lines with paths, the Kubernetes client's
response bodies; Powertools' batch utility logs each failed record's exception text), and a
payload can carry an observation or a queue message. `--log-level DEBUG`
is for our own code: it never turns them on. Named loggers keep their own level, so a later
`logging.basicConfig(level="DEBUG")` (which sets the root) does not reach them.
"""

from __future__ import annotations

import logging

WIRE_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "pynamodb", "kubernetes",
                "google", "googleapiclient", "grpc", "httpx", "httpcore", "requests",
                # Batch and idempotency utilities log exception text and records at DEBUG.
                "aws_lambda_powertools.utilities",
                # The local stack's moto: once it authorizes requests, it logs each request's
                # parameters (a queue message's body) at DEBUG.
                "moto")


def quiet_wire_logs() -> None:
    for name in WIRE_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:  # NOTSET (0) would follow the root down to DEBUG
            logger.setLevel(logging.WARNING)
