"""A plain DynamoDB table for tests that check the local accommodations against moto itself."""

from __future__ import annotations

from typing import Any


def create_pk_sk_table(client: Any, name: str) -> None:
    """An on-demand table keyed by string `pk` (hash) and `sk` (range), like the template's."""
    client.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                   {"AttributeName": "sk", "KeyType": "RANGE"}])
