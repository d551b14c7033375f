"""Running the template's handlers in-process, the way Lambda would.

Each function gets a small pool of execution environments: a handler module is loaded once per
environment (its own module globals, like a Lambda sandbox), and an environment serves one
invocation at a time. Concurrent HTTP requests therefore never share a resolver's per-request
state, exactly as in Lambda.
"""

from __future__ import annotations

import importlib.util
import queue
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from infercrane.local.template import FunctionSpec


@dataclass
class LambdaContext:
    function_name: str
    memory_limit_in_mb: int = 512
    timeout_s: float = 30.0
    aws_request_id: str = ""
    invoked_function_arn: str = ""
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class FunctionPool:
    def __init__(self, spec: FunctionSpec, root: Path, arn: str, size: int = 8):
        self.spec = spec
        self._root = root
        self._arn = arn
        self._size = size
        self._idle: queue.LifoQueue[Any] = queue.LifoQueue()
        self._created = 0
        self._lock = threading.Lock()
        self.invocations = 0

    def _load(self) -> Any:
        module_name, attr = self.spec.handler.rsplit(".", 1)
        path = self._root / self.spec.code_uri / f"{module_name}.py"
        name = f"_infercrane_fn_{self.spec.short_name}_{self._created}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot load handler {path}")
        module: ModuleType = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        loader_spec.loader.exec_module(module)
        return getattr(module, attr)

    def _acquire(self) -> Any:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._created < self._size:
                self._created += 1
                return self._load()
        return self._idle.get()

    def warm(self) -> None:
        self._idle.put(self._acquire())

    def invoke(self, event: dict[str, Any], timeout_s: float = 30.0) -> Any:
        handler = self._acquire()
        try:
            self.invocations += 1
            ctx = LambdaContext(function_name=self.spec.logical_id, timeout_s=timeout_s,
                                aws_request_id=str(uuid.uuid4()), invoked_function_arn=self._arn)
            return handler(event, ctx)
        finally:
            self._idle.put(handler)
