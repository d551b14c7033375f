"""Binding pynamodb models to a table at run time.

Table names come from settings (CloudFormation names them), so each store builds a subclass of its
model with a `Meta` pointing at the configured table and endpoint. This is the injection point:
tests and the local stack pass a moto endpoint, Lambda passes nothing.
"""

from __future__ import annotations

from typing import TypeVar

import pynamodb.connection.base
from pynamodb.models import Model

from infercrane.adapters.aws_session import shared_session

M = TypeVar("M", bound=Model)

# pynamodb gives every model's connection a botocore session of its own (`get_session()`), each
# loading botocore's data again (~70 ms a client); pynamodb has no setting for it, so its
# connections take the process's shared session instead (clients from it are created under a lock,
# which is why pynamodb made the sessions per thread).
pynamodb.connection.base.get_session = shared_session


class DynamoConfig:
    """Where a table lives: the injected 'client' of every DynamoDB adapter."""

    def __init__(self, region: str, host: str | None = None, max_retry_attempts: int = 8):
        self.region = region
        self.host = host
        self.max_retry_attempts = max_retry_attempts


def bind(model: type[M], table_name: str, config: DynamoConfig) -> type[M]:
    meta = type(
        "Meta",
        (),
        {
            "table_name": table_name,
            "region": config.region,
            "host": config.host,
            "max_retry_attempts": config.max_retry_attempts,
            "connect_timeout_seconds": 5,
            "read_timeout_seconds": 10,
        },
    )
    bound: type[M] = type(model.__name__, (model,), {"Meta": meta, "__module__": model.__module__})
    return bound
