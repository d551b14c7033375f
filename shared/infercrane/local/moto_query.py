"""A range-indexed DynamoDB Query for the local stack's moto server.

moto 5 answers every Query page by sorting the whole table, filtering it to the partition, sorting
again and walking from the first item to the page's ExclusiveStartKey, comparing through
`DynamoType` objects: a page costs O(n log n) in the table size, so reading a range in pages is
quadratic. Observations left DynamoDB for segments (issue 27), but the capacity table's hour
index and rollups are still read in ranges: `tests/e2e/test_capacity_cli.py` takes ~1.6x as long
without this module, and a 720 h report over 20,000 fresh attempts (6.2-6.4 s with it) runs into
API Gateway's 29 s timeout. This module narrows what moto's own `Table.query` sees to the items
that can be on the page: the partition (the table's own dict, or for an index one pass over the
items' hash attribute; kept sorted until the next write request), sorted by moto's own ordering
(`cast_value` of the sort attributes), cut by bisection at the ExclusiveStartKey and the key
condition, and ended once the Limit or the 1 MB page size is certainly reached. moto then runs
unchanged on that slice: the same key-condition checks, ordering, Limit and size cut,
LastEvaluatedKey, projection, filter expression and deep copy, so its answers stay moto's
(`tests/integration/test_local_moto_query.py` compares both on tables with indexes, filters,
Limit and ScanIndexForward=False). Its answers are written by `moto_answers.py`.

Shapes this does not narrow (legacy KeyConditions filters, multi-attribute index keys, mixed
key types, keys missing from the start key) go to moto's query untouched.
"""

from __future__ import annotations

import bisect
import copy
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from infercrane.adapters.library_patches import may_patch

PATCH = "moto DynamoDB Query narrowed to the page's items"
LOST = ("each Query page walks and sorts the whole partition: the capacity report's range "
        "Queries are several times slower (a 720 h report can hit API Gateway's 29 s timeout)")
_installed = threading.Lock()
# DynamoDB's (and moto's) largest item: past a page's last kept item, only an item bigger than
# what is left of the 1 MB could still end the page.
_MAX_ITEM = 400 * 1024
_original: Callable[..., Any] | None = None
_original_call: Callable[..., Any] | None = None
_original_put: Callable[..., Any] | None = None
_original_delete: Callable[..., Any] | None = None
# Requests that change no item; and those whose changes reach moto's Table.put_item and
# Table.delete_item, which the hooks below apply to the cached indexes. Any other DynamoDB request
# bumps the generation before and after it runs, which empties the cache (a read overlapping
# such a write never caches).
_READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "DescribeTable", "ListTables",
                    "DescribeTimeToLive", "DescribeContinuousBackups", "ListTagsOfResource"})
_FOLLOWED = frozenset({"PutItem", "DeleteItem", "BatchWriteItem"})
_cache_lock = threading.RLock()
_cache: dict[tuple[int, str | None], _Index] = {}
_generation = 0
_cache_generation = 0


class _Unsupported(Exception):
    """A query shape narrowed by nothing here: moto's own query answers it."""


def _key_names(table: Any, index_name: str | None) -> tuple[str, str, list[str]]:
    """(hash attribute, range attribute or None, the attributes moto sorts a partition by)."""
    if not index_name:
        if not table.range_key_attr:
            raise _Unsupported
        hash_attr, range_attr = table.hash_key_attr, table.range_key_attr
        hash_attrs, range_attrs = [hash_attr], [range_attr]
    else:
        index = {i.name: i for i in table.all_indexes()}.get(index_name)
        if index is None:
            raise _Unsupported  # moto raises its own validation error
        hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
        ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
        if len(hashes) != 1 or len(ranges) != 1:
            raise _Unsupported
        hash_attr, range_attr = hashes[0], ranges[0]
        hash_attrs, range_attrs = [hash_attr, table.hash_key_attr], [range_attr,
                                                                     table.range_key_attr]
    # moto's own order: index hash, index range, table hash, table range (those that exist).
    order: list[str] = table._generate_attr_to_sort_by(hash_attrs, range_attrs)
    if order[:2] != [hash_attr, range_attr]:
        raise _Unsupported
    return hash_attr, range_attr, order


def _group(value: Any) -> tuple[Any, ...]:
    """A hash key value as moto compares it (DynamoType equality: type and cast value)."""
    return (value.type, value.cast_value)


class _Index:
    """Every partition of one table (or of one of its indexes) in moto's order, built in one
    pass over the table and then kept current by the PutItem and DeleteItem hooks below: a page
    of an hourly index partition costs a bisection, not a walk over the whole table."""

    def __init__(self, table: Any, index_name: str | None, hash_attr: str, range_attr: str,
                 order: Sequence[str]):
        self.table = weakref.ref(table)
        self.index_name = index_name
        self.hash_attr = hash_attr
        self.range_attr = range_attr
        self.order = tuple(order)
        self.groups: dict[tuple[Any, ...], tuple[list[tuple[Any, ...]], list[Any]]] = {}
        members: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], Any]]] = {}
        for item in table.all_items_unsorted():
            group = self._member(item)
            if group is not None:
                members.setdefault(group, []).append((_sort_key(item, self.order), item))
        try:
            for group, pairs in members.items():
                pairs.sort(key=lambda pair: pair[0])
                self.groups[group] = ([k for k, _ in pairs], [i for _, i in pairs])
        except (KeyError, TypeError) as exc:  # a missing or mixed-type sort attribute
            raise _Unsupported from exc

    def _member(self, item: Any) -> tuple[Any, ...] | None:
        if self.index_name is None:
            return _group(item.attrs[self.hash_attr])
        value = item.attrs.get(self.hash_attr)
        # moto's own test for index membership: the hash value is there and truthy, and so is
        # the range value.
        if value and item.attrs.get(self.range_attr):
            return _group(value)
        return None

    def partition(self, hash_key: Any) -> tuple[list[tuple[Any, ...]], list[Any]]:
        return self.groups.get(_group(hash_key), ([], []))

    def discard(self, item: Any) -> None:
        group = self._member(item)
        if group is None:
            return
        keys, items = self.groups[group]
        key = _sort_key(item, self.order)
        at = bisect.bisect_left(keys, key)
        if at == len(keys) or keys[at] != key:
            raise LookupError("an item the index never held")
        del keys[at], items[at]

    def insert(self, item: Any) -> None:
        group = self._member(item)
        if group is None:
            return
        keys, items = self.groups.setdefault(group, ([], []))
        key = _sort_key(item, self.order)
        at = bisect.bisect_left(keys, key)
        keys.insert(at, key)
        items.insert(at, item)


def _sorted_partition(table: Any, index_name: str | None, hash_attr: str, range_attr: str,
                      order: Sequence[str], hash_key: Any) -> tuple[list[tuple[Any, ...]],
                                                                     list[Any]]:
    """The partition in moto's order (call with `_cache_lock` held). The table's index is built
    on its first Query and kept until a request changes items in ways the hooks do not follow
    (UpdateItem, transactions, table changes), which empties the cache."""
    global _cache_generation
    if _cache_generation != _generation:
        _cache.clear()
        _cache_generation = _generation
    key = (id(table), index_name)
    index = _cache.get(key)
    if index is None or index.table() is not table:
        index = _Index(table, index_name, hash_attr, range_attr, order)
        _cache[key] = index
    return index.partition(hash_key)


def _tracked(table: Any) -> list[_Index]:
    return [index for (tid, _), index in _cache.items()
            if tid == id(table) and index.table() is table]


def _forget(table: Any) -> None:
    for key in [k for k, index in _cache.items() if k[0] == id(table)]:
        del _cache[key]


def put_item(self: Any, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    assert _original_put is not None
    from moto.dynamodb.models.dynamo_type import DynamoType

    with _cache_lock:
        indexes = _tracked(self)
        if not indexes:
            return _original_put(self, item_attrs, *args, **kwargs)
        try:
            old = self.get_item(DynamoType(item_attrs[self.hash_key_attr]),
                                DynamoType(item_attrs[self.range_key_attr])
                                if self.range_key_attr else None)
        except Exception:  # moto's own put_item refuses the item below, with its own error
            old = None
        new = _original_put(self, item_attrs, *args, **kwargs)
        try:
            for index in indexes:
                if old is not None:
                    index.discard(old)
                index.insert(new)
        except (KeyError, LookupError, TypeError):
            _forget(self)  # a shape the index cannot hold: rebuilt (or refused) on next Query
        return new


def delete_item(self: Any, *args: Any, **kwargs: Any) -> Any:
    assert _original_delete is not None
    with _cache_lock:
        old = _original_delete(self, *args, **kwargs)
        if old is not None:
            try:
                for index in _tracked(self):
                    index.discard(old)
            except (KeyError, LookupError, TypeError):
                _forget(self)
        return old


def _sort_key(item: Any, order: Sequence[str]) -> tuple[Any, ...]:
    return tuple(item.attrs[name].cast_value for name in order)


def _start_key(start: dict[str, Any], order: Sequence[str]) -> tuple[Any, ...]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    if any(name not in start for name in order):
        raise _Unsupported
    return tuple(DynamoType(start[name]).cast_value for name in order)


def _bounds(firsts: list[Any], comparison: str | None, values: list[Any]) -> tuple[int, int]:
    """The slice of sorted first sort-key values a key condition can match (a superset for
    BEGINS_WITH; moto's own check then decides)."""
    n = len(firsts)
    if comparison is None:
        return 0, n
    v = [x.cast_value for x in values]
    if comparison == "EQ":
        return bisect.bisect_left(firsts, v[0]), bisect.bisect_right(firsts, v[0])
    if comparison == "LT":
        return 0, bisect.bisect_left(firsts, v[0])
    if comparison == "LE":
        return 0, bisect.bisect_right(firsts, v[0])
    if comparison == "GT":
        return bisect.bisect_right(firsts, v[0]), n
    if comparison == "GE":
        return bisect.bisect_left(firsts, v[0]), n
    if comparison == "BETWEEN":
        return bisect.bisect_left(firsts, v[0]), bisect.bisect_right(firsts, v[1])
    if comparison == "BEGINS_WITH":
        return bisect.bisect_left(firsts, v[0]), n
    raise _Unsupported


def _narrow(table: Any, hash_key: Any, range_comparison: str | None, range_objs: list[Any],
            limit: int | None, exclusive_start_key: dict[str, Any] | None, forward: bool,
            index_name: str | None, filter_kwargs: dict[str, Any],
            range_key_conditions: list[Any] | None) -> list[Any]:
    if filter_kwargs or hash_key is None or (range_key_conditions and
                                             len(range_key_conditions) > 1):
        raise _Unsupported
    hash_attr, range_attr, order = _key_names(table, index_name)
    with _cache_lock:  # a write to the table waits until the page is cut
        keys, items = _sorted_partition(table, index_name, hash_attr, range_attr, order,
                                        hash_key)
        return _cut(keys, items, range_attr, order, range_comparison, range_objs, limit,
                    exclusive_start_key, forward)


def _cut(keys: list[tuple[Any, ...]], items: list[Any], range_attr: str, order: Sequence[str],
         range_comparison: str | None, range_objs: list[Any], limit: int | None,
         exclusive_start_key: dict[str, Any] | None, forward: bool) -> list[Any]:
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    # The partition's hash value is constant: the range attribute (second) decides the order.
    lo, hi = _bounds([k[1] for k in keys], range_comparison, range_objs)
    if exclusive_start_key:
        start = _start_key(exclusive_start_key, order)
        if forward:
            lo = max(lo, bisect.bisect_right(keys, start))
        else:
            hi = min(hi, bisect.bisect_left(keys, start))
    # moto walks the rest of the partition in order; only items it would act on go to the view:
    # those its key condition keeps, and the first item (kept or not) that ends the page because
    # the Limit is reached or it would carry the page past 1 MB, which names the last key.
    positions = range(lo, len(items)) if forward else range(hi - 1, -1, -1)
    page: list[Any] = []
    kept = size = 0
    for position in positions:
        item = items[position]
        inside = lo <= position < hi
        if not inside and (limit is None or kept < limit) and RESULT_SIZE_LIMIT - size > _MAX_ITEM:
            break  # nothing further can end the page or be kept
        item_size = item.size()
        if (limit is not None and kept == limit) or size + item_size > RESULT_SIZE_LIMIT:
            page.append(item)
            break
        if inside and (range_comparison is None or item.attrs[range_attr].compare(
                range_comparison, range_objs)):
            page.append(item)
            kept += 1
            size += item_size
    return page


def query(self: Any, hash_key: Any, range_comparison: str | None, range_objs: list[Any],
          limit: int, exclusive_start_key: dict[str, Any], scan_index_forward: bool,
          projection_expressions: Any, index_name: str | None = None,
          consistent_read: bool = False, filter_expression: Any = None,
          hash_key_conditions: Any = None, range_key_conditions: Any = None,
          **filter_kwargs: Any) -> Any:
    assert _original is not None
    args = (range_comparison, range_objs, limit)
    rest = dict(projection_expressions=projection_expressions, index_name=index_name,
                consistent_read=consistent_read, filter_expression=filter_expression,
                hash_key_conditions=hash_key_conditions,
                range_key_conditions=range_key_conditions, **filter_kwargs)
    try:
        page = _narrow(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                       scan_index_forward is not False, index_name, filter_kwargs,
                       range_key_conditions)
    except _Unsupported:
        return _original(self, hash_key, *args, exclusive_start_key, scan_index_forward, **rest)
    # A shallow view sharing every table attribute but whose items are the page: moto's query
    # reads items only through all_items(); the start key is already applied.
    view = copy.copy(self)
    view.all_items = lambda: list(page)
    return _original(view, hash_key, *args, None, scan_index_forward, **rest)


def _all_items_unsorted(self: Any) -> list[Any]:
    if self.range_key_attr:
        return [item for partition in self.items.values() for item in partition.values()]
    return list(self.items.values())


def _bump() -> None:
    global _generation
    with _cache_lock:
        _generation += 1


def call_action(self: Any) -> Any:
    assert _original_call is not None
    action = self._get_action()
    if action in _READS or action in _FOLLOWED:
        return _original_call(self)
    _bump()
    try:
        return _original_call(self)
    finally:
        _bump()


def install() -> bool:
    """Route moto's Table.query through the narrowing above (idempotent, process-wide); True
    when it is patched, False on a moto it was not checked on (moto's own Query stays)."""
    global _original, _original_call, _original_put, _original_delete
    with _installed:
        if _original is not None:
            return True
        if not may_patch(PATCH, "moto", LOST):
            return False
        from moto.dynamodb.models.table import Table
        from moto.dynamodb.responses import DynamoHandler

        _bump()
        _original = Table.query
        _original_call = DynamoHandler.call_action
        _original_put, _original_delete = Table.put_item, Table.delete_item
        Table.put_item = put_item  # type: ignore[method-assign]
        Table.delete_item = delete_item  # type: ignore[method-assign]
        Table.all_items_unsorted = _all_items_unsorted  # type: ignore[attr-defined]
        Table.query = query  # type: ignore[method-assign]
        DynamoHandler.call_action = call_action  # type: ignore[method-assign]
        return True


def uninstall() -> None:
    global _original, _original_call, _original_put, _original_delete
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.responses import DynamoHandler

    with _installed:
        if _original is not None:
            Table.query = _original  # type: ignore[method-assign]
            Table.put_item = _original_put  # type: ignore[method-assign,assignment]
            Table.delete_item = _original_delete  # type: ignore[method-assign,assignment]
            _original_put = _original_delete = None
            DynamoHandler.call_action = _original_call  # type: ignore[method-assign,assignment]
            _original = _original_call = None
            _bump()
