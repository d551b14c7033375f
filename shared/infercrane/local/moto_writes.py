"""Faster writes (and cheaper requests) for the local stack's moto server.

Written when every observation was a DynamoDB item; observations are segments now (issue 27) and
imports are no faster with it, but the capacity table's writes are (keys-only BatchGetItem of
attempt ids, TransactWriteItems of 100, BatchWriteItem of rollups): posting 20,000 lifecycle
attempts to a fresh stack took 11.3-17.9 s with it (six runs) and 18.9-24.2 s without (two runs),
loads 4-6. moto 5 spends that time in three places that this module replaces with equivalent,
linear code; what moto decides (errors, stored items, answers) is unchanged:

- `Item.__init__` fills its size-limited attribute dict one attribute at a time, and every insert
  re-measures every attribute already there (`LimitedSizeDict.__setitem__`): quadratic in the
  attributes of an item. Here the same `DynamoType`s are built in the same order with a running
  size, and `ItemSizeTooLarge` is raised at the same attribute (sizes only grow, so "over the
  limit after this insert" is the same test).
- BatchWriteItem, BatchGetItem and TransactWriteItems bodies go through moto's shape-driven
  request parser, tens of microseconds per attribute value. For these operations the parsed
  parameters of a request an SDK sends are its JSON body as such (strings, booleans, lists and
  maps; no numbers, dates or defaults to convert), except binary values (`B`, `BS`), which the
  parser decodes from base64: a body holding either key goes to moto's parser, as does anything
  that is not a JSON object.
- Per request, moto's dispatcher finds the service of a host by listing its own package folder
  (hundreds of `stat` calls) and the handler's methods with `inspect.getmembers`. Both are pure
  functions of their argument (the host; the handler class): they are remembered.

`tests/integration/test_local_moto_writes.py` checks each against moto's own code: the same
stored items and errors for writes, the same parsed parameters, the same backend and method list.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from infercrane.adapters.library_patches import may_patch

PATCH = "moto item building, Batch* parsing and per-request lookups made linear"
LOST = ("item building stays quadratic in its attributes and every request lists moto's "
        "package: the capacity table's batch writes take about twice as long")
_installed = threading.Lock()
_originals: dict[str, Any] = {}
# Operations whose request shape has no member the parser converts except blobs.
_PLAIN_REQUESTS = frozenset({"BatchWriteItem", "BatchGetItem", "TransactWriteItems"})
_BINARY_KEYS = (b'"B":', b'"BS":', b'"B" :', b'"BS" :')
_ITEM_SIZE_LIMIT = 405000  # moto's LimitedSizeDict bound (see moto/dynamodb/models/dynamo_type.py)


def item_init(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
    """moto's `Item.__init__`, with a running total instead of re-measuring on every insert, and
    scalar attribute values (`{"S": str}`, `{"N": str}`, `{"BOOL": bool}`, `{"NULL": bool}`) typed
    and measured inline: the `DynamoType` moto's constructor makes of them (its type and value
    are the dict's one key and value) and the size its `size()` computes. Anything else goes
    through moto's own `DynamoType` and `size()`."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
    from moto.dynamodb.models.utilities import bytesize

    self.hash_key = hash_key
    self.range_key = range_key
    limited = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.__init__(limited)
    total = 0
    new = DynamoType.__new__
    for key, value in attrs.items():
        kind = raw = None
        if type(value) is dict and len(value) == 1:
            [(kind, raw)] = value.items()
        if kind in ("S", "N") and type(raw) is str:
            typed = new(DynamoType)
            typed.type, typed.value = kind, raw
            size = len(raw) if kind == "N" else len(raw.encode("utf-8"))
        elif kind in ("BOOL", "NULL") and type(raw) is bool:
            typed = new(DynamoType)
            typed.type, typed.value = kind, raw
            size = 1
        else:
            typed = DynamoType(value)
            size = typed.size()
        total += bytesize(str(key)) + size
        if total > _ITEM_SIZE_LIMIT:
            raise ItemSizeTooLarge
        dict.__setitem__(limited, key, typed)
    self.attrs = limited


def plain_parameters(action: str, body: bytes) -> dict[str, Any] | None:
    """The parameters moto's parser would make of this request body, when they are the body's
    JSON as such; None when the parser must decide (another operation, binary values, not an
    object)."""
    if action not in _PLAIN_REQUESTS or any(k in body for k in _BINARY_KEYS):
        return None
    try:
        params = json.loads(body)
    except ValueError:
        return None
    return params if isinstance(params, dict) else None


def parse_parameters(self: Any, request: Any) -> None:
    params = plain_parameters(self._get_action(), request.data)
    if params is None:
        _originals["parse_parameters"](self, request)
    else:
        self.params = params


def _remembered(fn: Callable[[Any], Any], bound: int = 1024) -> Callable[[Any], Any]:
    """`fn`, remembering up to `bound` answers (hosts come from requests: the bound keeps a
    client that varies its Host header from growing the cache)."""
    cache: dict[Any, Any] = {}
    lock = threading.Lock()

    def remembered(arg: Any) -> Any:
        try:
            return cache[arg]
        except KeyError:
            pass
        value = fn(arg)
        with lock:
            if len(cache) < bound:
                cache[arg] = value
        return value

    return remembered


def install() -> bool:
    """Route moto's item construction, Batch* parsing, host lookup and method listing through the
    code above (idempotent, process-wide); True when it is patched, False on a moto it was not
    checked on (moto's own code stays)."""
    with _installed:
        if _originals:
            return True
        if not may_patch(PATCH, "moto", LOST):
            return False
        import moto.core.responses as core_responses
        from moto.dynamodb.models.dynamo_type import Item
        from moto.dynamodb.responses import DynamoHandler
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication

        _originals.update(
            item_init=Item.__init__, parse_parameters=DynamoHandler.parse_parameters,
            backend_for_host=DomainDispatcherApplication.get_backend_for_host,
            method_names=core_responses.method_names_from_class)
        Item.__init__ = item_init  # type: ignore[method-assign]
        DynamoHandler.parse_parameters = parse_parameters  # type: ignore[method-assign]
        backend_for = _remembered(
            lambda key: _originals["backend_for_host"](key[0], key[1]))
        DomainDispatcherApplication.get_backend_for_host = (  # type: ignore[method-assign]
            lambda self, host: backend_for((self, host)))
        core_responses.method_names_from_class = _remembered(  # type: ignore[assignment]
            _originals["method_names"])
        return True


def uninstall() -> None:
    import moto.core.responses as core_responses
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.responses import DynamoHandler
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    with _installed:
        if not _originals:
            return
        Item.__init__ = _originals["item_init"]  # type: ignore[method-assign]
        DynamoHandler.parse_parameters = _originals["parse_parameters"]  # type: ignore[method-assign]
        DomainDispatcherApplication.get_backend_for_host = (  # type: ignore[method-assign]
            _originals["backend_for_host"])
        core_responses.method_names_from_class = _originals["method_names"]
        _originals.clear()
