"""Binding pynamodb models to a table at run time.

Table names come from settings (CloudFormation names them), so each store builds a subclass of its
model with a `Meta` pointing at the configured table and endpoint. This is the injection point:
tests and the local stack pass a moto endpoint, Lambda passes nothing.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import pynamodb.connection.base
from botocore.validate import ParamValidationDecorator
from pynamodb.models import Model

from infercrane.adapters.aws_session import shared_session
from infercrane.adapters.library_patches import may_patch
from infercrane.errors import DependencyUnavailable, DomainError, InvalidInput

M = TypeVar("M", bound=Model)

_PYNAMODB_GET_SESSION = pynamodb.connection.base.get_session  # pynamodb's own (tests restore it)


def share_session() -> bool:
    """pynamodb gives every model's connection a botocore session of its own (`get_session()`),
    each loading botocore's data again (~70 ms a client); pynamodb has no setting for it, so its
    connections take the process's shared session instead (clients from it are created under a
    lock, which is why pynamodb made the sessions per thread). Guarded: True when patched."""
    if not may_patch("pynamodb connections share the process's botocore session", "pynamodb",
                     "each model's connection builds a botocore session of its own (~70 ms of "
                     "CPU per client on a cold start)"):
        return False
    pynamodb.connection.base.get_session = shared_session
    return True


share_session()


def write_error(exc: Exception, unavailable: str) -> DomainError:
    """The domain error for a failed write of caller content. DynamoDB's ValidationException
    refuses the content itself (an item over 400 KB, a number out of its range, text it cannot
    encode): the same write fails the same way forever, so it is the caller's 422
    `unstorable_content`, never `dependency_unavailable` (a 503 clients retry and the 5xx alarm
    counts). Validation refuses all of these first; this is the net under it."""
    if getattr(exc, "cause_response_code", None) == "ValidationException":
        return InvalidInput("The store cannot hold this content.", code="unstorable_content")
    return DependencyUnavailable(unavailable)


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


def _items_as_json(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                   **_: Any) -> None:
    """`before-parse` handler for Query: hand the page's Items and LastEvaluatedKey over as
    `json.loads` reads them, and leave botocore's shape-driven parser (which walks every
    attribute value in Python, most of a large read's time) only the counts.

    On DynamoDB's JSON protocol the parser returns exactly what `json.loads` gives for every
    attribute type but binary (`B`, `BS`: base64 text it decodes to bytes); a page whose text
    holds `"B":` or `"BS":` anywhere, even as a map key, is left to the parser. Inside a string a
    quote is escaped, so string contents never match. Errors (non-200) are left to it too.
    """
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes | bytearray):
        return
    if b'"B":' in body or b'"BS":' in body:
        return
    doc = json.loads(body)
    if not isinstance(doc, dict):
        return
    for name in ("Items", "LastEvaluatedKey"):
        if name in doc:
            customized_response_dict[name] = doc.pop(name)
    response_dict["body"] = json.dumps(doc).encode()


def parse_query_items_as_json(connection: Any) -> None:
    """Install `_items_as_json` on the botocore client behind a pynamodb connection (once), when
    botocore is the version it was checked on: it relies on botocore's parser giving exactly
    what `json.loads` gives for non-binary attributes, which botocore does not promise."""
    if not may_patch("Query items parsed by json.loads (before-parse)", "botocore",
                     "botocore's parser reads every attribute value in Python (same items, "
                     "slower large reads)"):
        return
    client = connection.connection.client
    if not getattr(client, "_infercrane_json_items", False):
        client.meta.events.register("before-parse.dynamodb.Query", _items_as_json)
        client._infercrane_json_items = True


# Operations whose request is the caller's parameters as JSON, when they hold only strings,
# booleans, lists and maps (botocore's JSON serializer copies those member by member, in order).
_PLAIN_JSON_OPERATIONS = frozenset({"BatchWriteItem", "BatchGetItem", "TransactWriteItems"})


class _PlainJsonSerializer:
    """botocore's request serializer for one client, with BatchWriteItem, BatchGetItem and
    TransactWriteItems bodies made by `json.dumps` (C) instead of botocore's shape walk (Python,
    per attribute value: most of a batch write's CPU in the api function).

    Same bytes, or botocore decides: on DynamoDB's JSON protocol botocore copies each structure
    member, map entry, list element, string and boolean unchanged, in the caller's order, and
    `json.dumps` the result. It differs only where it converts or drops: bytes (`B`, `BS`: base64;
    `json.dumps` refuses them), `None` members (skipped; here any `null` in the body), and
    top-level members outside the operation's input shape. Those requests go to botocore's own
    serializer. Nested members are not checked against the model: the callers are this
    package's stores, which build `RequestItems` and `TransactItems` from their own mapping. The
    envelope (method, path, headers) is botocore's own, made for an empty parameter set.
    """

    def __init__(self, inner: Any):
        self._inner = inner

    def serialize_to_request(self, parameters: Any, operation_model: Any) -> dict[str, Any]:
        body = (_plain_json_body(parameters, operation_model)
                if operation_model.name in _PLAIN_JSON_OPERATIONS else None)
        request: dict[str, Any] = self._inner.serialize_to_request(
            {} if body is not None else parameters, operation_model)
        if body is not None:
            request["body"] = body
        return request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _plain_json_body(parameters: Any, operation_model: Any) -> bytes | None:
    if not isinstance(parameters, dict) or not parameters.keys() <= set(
            operation_model.input_shape.members):
        return None
    try:
        body = json.dumps(parameters).encode("utf-8")
    except (TypeError, ValueError):  # bytes, or anything else botocore would convert
        return None
    if b"null" in body:  # a None member botocore would skip (or a string holding the word)
        return None
    return body


def plain_json_batch_requests(connection: Any) -> None:
    """Install `_PlainJsonSerializer` on the botocore client behind a pynamodb connection (once).
    Only on a client without parameter validation (pynamodb makes its clients so): validation
    would check the empty parameter set the envelope is made from, and skipping it must not be
    a side effect of this module. `_serializer` is botocore's private attribute: only on the
    botocore it was checked on; any other keeps its own serializer (same bytes, slower)."""
    if not may_patch("batch and transaction bodies serialized by json.dumps", "botocore",
                     "botocore's serializer walks every attribute value in Python (same bytes, "
                     "slower batch writes)"):
        return
    client = connection.connection.client
    current = getattr(client, "_serializer", None)
    if current is not None and not isinstance(
            current, ParamValidationDecorator | _PlainJsonSerializer):
        client._serializer = _PlainJsonSerializer(current)
