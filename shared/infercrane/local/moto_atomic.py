"""moto made as atomic as AWS where the service relies on it (every read-modify-write does).

moto's server answers requests on threads, and its backends check and write without a lock:

- a conditional PutItem/UpdateItem/DeleteItem evaluates its condition, then writes. A second
  thread can run between the two (the GIL switches every 5 ms), so two conditional writes of one
  key could both succeed, which DynamoDB never allows;
- TransactWriteItems deep-copies every table it touches before it starts (to roll back), which
  costs the whole table per transaction, and a rollback puts the copy back, erasing whatever
  other requests wrote meanwhile;
- UpdateSecretVersionStage checks that `RemoveFromVersionId` holds the stage and then moves it,
  unlocked; and it leaves GetSecretValue without a `VersionStage` answering the version it
  answered before, where AWS answers the version holding AWSCURRENT.

Here every DynamoDB and Secrets Manager write of the process holds one lock; a transaction checks
every condition first and writes only if all hold (so a cancelled one has written nothing), undoing
its own writes by item if one is refused part way; and moving AWSCURRENT moves what GetSecretValue
answers. What moto decides otherwise (errors, cancellation reasons, stored items) is unchanged.
`tests/integration/test_races_*.py` depend on it.

Guarded (adapters/library_patches.py): on a moto other than the one it was checked on, nothing is
patched and moto's own behaviour stays (`LOST` says what that gives up); the race tests then skip,
since against unlocked writes a race passes or fails by chance and neither would mean anything.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from infercrane.adapters.library_patches import may_patch

PATCH = "moto's DynamoDB and Secrets Manager writes atomic (one lock, checked transactions)"
LOST = ("a conditional write or transaction is not atomic across moto's request threads (two "
        "conditional writes of one key can both succeed), TransactWriteItems copies every table it "
        "touches and its rollback erases concurrent writes, and GetSecretValue without a stage "
        "does not follow a moved AWSCURRENT")

_WRITES = threading.RLock()
_installed = threading.Lock()
_originals: dict[tuple[str, str], Any] = {}


def _locked(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _WRITES:
            return fn(*args, **kwargs)
    return call


_parsed: dict[str, Any] = {}


def _condition(parse: Callable[..., Any], expression: str, names: dict[str, Any] | None,
               values: dict[str, Any] | None) -> Any:
    """moto's parsed condition, parsed once per distinct expression without names or values (a
    transaction of 100 `attribute_not_exists(sk)` parsed it 100 times: most of its cost). The
    parsed form is only evaluated against items, never changed."""
    if names or values:
        return parse(expression, names, values)
    if expression not in _parsed:
        if len(_parsed) > 256:
            _parsed.clear()
        _parsed[expression] = parse(expression, names, values)
    return _parsed[expression]


def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto's TransactWriteItems: the same checks and answers, every condition evaluated before
    anything is written, and no table copied."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    seen: set[tuple[str, str]] = set()
    planned: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    errors: list[tuple[Any, Any, Any]] = []
    for entry in transact_items:
        if len(entry) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(entry.items()))
        original: dict[str, Any] | None = None
        try:
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table = self.get_table(op["TableName"])
            if op_type == "Put":
                key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = op["Item"][table.range_key_attr]
            else:
                key = op["Key"]
            unique = (str(op["TableName"]), str(dict(sorted(key.items()))))
            if unique in seen:
                raise MultipleTransactionsException()
            seen.add(unique)
            current = self.get_item(op["TableName"], key)
            if op.get("ConditionExpression") is not None:
                condition = _condition(get_filter_expression, op["ConditionExpression"],
                                       op.get("ExpressionAttributeNames"),
                                       op.get("ExpressionAttributeValues"))
                if not condition.expr(current):
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        original = current.to_json()["Attributes"]
                    errors.append(("ConditionalCheckFailed", "The conditional request failed",
                                   original))
                    continue
            planned.append((op_type, op, key))
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            raise
        except Exception as e:  # moto reports any other failure as a cancellation reason
            errors.append((type(e).__name__, str(e), original))
    if any(code is not None for code, _, _ in errors):
        raise TransactionCanceledException(errors)
    undo: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    try:
        for op_type, op, key in planned:
            if op_type == "ConditionCheck":
                continue
            before = self.get_item(op["TableName"], key)
            undo.append((op["TableName"], key,
                         None if before is None else before.to_json()["Attributes"]))
            names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            if op_type == "Put":
                self.put_item(op["TableName"], op["Item"], expression_attribute_names=names,
                              expression_attribute_values=values)
            elif op_type == "Delete":
                self.delete_item(op["TableName"], key)
            else:
                self.update_item(op["TableName"], key, update_expression=op["UpdateExpression"],
                                 expression_attribute_names=names,
                                 expression_attribute_values=values)
    except Exception:
        for table_name, key, attributes in reversed(undo):
            if attributes is None:
                self.delete_item(table_name, key)
            else:
                self.put_item(table_name, attributes)
        raise


def update_secret_version_stage(self: Any, secret_id: str, version_stage: str,
                                remove_from_version_id: str, move_to_version_id: str,
                                ) -> tuple[str, str]:
    """moto's, and GetSecretValue without a stage then answers the version holding AWSCURRENT."""
    answer = _originals[("secretsmanager", "update_secret_version_stage")](
        self, secret_id, version_stage, remove_from_version_id, move_to_version_id)
    if version_stage == "AWSCURRENT" and move_to_version_id:
        self.secrets[secret_id].set_default_version_id(move_to_version_id)
    return answer


def install() -> bool:
    """Patch moto (once); True when it is patched, False on a moto it was not checked on."""
    with _installed:
        if _originals:
            return True
        if not may_patch(PATCH, "moto", LOST):
            return False
        from moto.dynamodb.models import DynamoDBBackend
        from moto.secretsmanager.models import SecretsManagerBackend

        for name in ("put_item", "update_item", "delete_item"):
            _originals[("dynamodb", name)] = getattr(DynamoDBBackend, name)
            setattr(DynamoDBBackend, name, _locked(getattr(DynamoDBBackend, name)))
        _originals[("dynamodb", "transact_write_items")] = DynamoDBBackend.transact_write_items
        DynamoDBBackend.transact_write_items = _locked(transact_write_items)  # type: ignore[method-assign]
        for name in ("create_secret", "put_secret_value", "update_secret_version_stage"):
            _originals[("secretsmanager", name)] = getattr(SecretsManagerBackend, name)
        SecretsManagerBackend.update_secret_version_stage = update_secret_version_stage  # type: ignore[method-assign]
        for name in ("create_secret", "put_secret_value", "update_secret_version_stage"):
            setattr(SecretsManagerBackend, name, _locked(getattr(SecretsManagerBackend, name)))
        return True


def uninstall() -> None:
    """Put moto's own methods back (tests comparing against moto's own answers)."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.secretsmanager.models import SecretsManagerBackend

    with _installed:
        for (service, name), original in _originals.items():
            setattr(DynamoDBBackend if service == "dynamodb" else SecretsManagerBackend, name,
                    original)
        _originals.clear()
