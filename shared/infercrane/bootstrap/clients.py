"""The stand-in the wiring hands adapters instead of a client it has not built yet."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class LazyClient:
    """Stands in for a botocore (or Google) client until its first attribute is read: a cold
    start that never calls it never pays for creating it."""

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._client: Any = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._factory()
        return getattr(self._client, name)
