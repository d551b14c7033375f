"""Lazy re-exports for the domain's packages (PEP 562): `from infercrane.domain.capacity import X`
loads only the module that defines X, so a cold start pays for what its entry point runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, homes: Mapping[str, str], namespace: dict[str, Any],
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: `homes` maps each public name to the module
    holding it (a submodule's name, or `batch` for `infercrane.domain.batch`); `namespace` is the
    package's `globals()`, where a name found once is kept as a plain attribute."""

    def getattr_(name: str) -> Any:
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = "infercrane.domain.batch" if module == "batch" else f"{package}.{module}"
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value  # found once: the next lookup is a plain module attribute
        return value

    def dir_() -> list[str]:
        return sorted([*namespace, *homes])

    return getattr_, dir_
