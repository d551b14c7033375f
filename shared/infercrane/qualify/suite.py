"""Running the local qualification: every promise against one target, then the evidence."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType

from infercrane.qualify.core import PromiseResult, guarded
from infercrane.qualify.target import Target

# One module per promise, in the order of the table.
PROMISE_MODULES = ("capture_privacy", "deterministic_digests", "tenancy", "aggregation",
                   "delegated_prefetch")


def promise_module(name: str) -> ModuleType:
    return importlib.import_module(f"infercrane.qualify.{name}")


def run_suite(target: Target, modules: Sequence[str] = PROMISE_MODULES,
              on_start: Callable[[str], None] | None = None,
              on_done: Callable[[PromiseResult], None] | None = None) -> list[PromiseResult]:
    results = []
    for name in modules:
        module = promise_module(name)
        if on_start:
            on_start(module.PROMISE)
        run: Callable[[], PromiseResult] = partial(module.run, target)
        result = guarded(module.PROMISE, run)
        # Let background work a promise started finish before the next one looks at storage.
        target.settle()
        results.append(result)
        if on_done:
            on_done(result)
    return results
