"""Running the template's functions the way Lambda does: each from its own built artifact, in its
own processes.

A function gets a small pool of execution environments. An environment is a process started with
`python -I -S` and only the function's artifact on `sys.path` (infercrane.local.lambda_worker), so
nothing from the CLI's venv or another function reaches it: a dependency missing from an artifact
fails here as it would on AWS. An environment imports its handler once (init), is kept warm, and
serves one invocation at a time. What Lambda enforces is enforced from template.yaml: an
invocation that runs past the function's Timeout or grows past its MemorySize kills the
environment (the next invocation starts a fresh one), and event and response payloads are limited
to Lambda's 6 MB for synchronous calls.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

from infercrane.local.artifacts import Artifact
from infercrane.local.template import FunctionSpec

log = logging.getLogger("infercrane.local")
WORKER = Path(__file__).with_name("lambda_worker.py")
MAX_SYNC_PAYLOAD = 6 * 1024 * 1024  # Lambda's limit on a synchronous request and response
INIT_TIMEOUT_S = 10.0  # Lambda's init phase limit
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class FunctionError(Exception):
    """An invocation that did not return a result, as Lambda reports it (errorType, message)."""

    def __init__(self, function: str, error_type: str, message: str, missing: list[str] | None = None):
        super().__init__(f"{function}: {error_type}: {message}")
        self.function = function
        self.error_type = error_type
        self.message = message
        self.missing = missing or []


class FunctionTimeout(FunctionError):
    pass


class PayloadTooLarge(FunctionError):
    pass


class LogSink:
    """Where every environment's output goes: the stack's stderr, without Powertools' raw EMF
    metric lines (CloudWatch turns those into metrics on AWS) unless the caller asked for DEBUG."""

    def __init__(self, stream: TextIO | None = None, keep_metrics: bool = False):
        self.stream = stream
        self.keep_metrics = keep_metrics
        self._lock = threading.Lock()

    def pump(self, source: Any) -> None:
        for raw in iter(source.readline, b""):
            line = raw.decode("utf-8", "replace")
            if not self.keep_metrics and line.startswith('{"_aws"'):
                continue
            with self._lock:
                stream = self.stream or sys.stderr
                try:
                    stream.write(line)
                    stream.flush()
                except (ValueError, OSError):
                    return


class Environment:
    """One execution environment: a warm process serving one invocation at a time."""

    def __init__(self, spec: FunctionSpec, artifact: Artifact, env: dict[str, str], sink: LogSink,
                 python: str):
        self.spec = spec
        self._lines: queue.Queue[bytes] = queue.Queue()
        self.proc = subprocess.Popen(  # noqa: S603 - our own worker, argv from template.yaml
            # -B: Lambda's folders are read-only, so the environment uses the bytecode the build
            # shipped and never writes its own (which would hide a build that ships none).
            [python, "-I", "-S", "-B", str(WORKER), spec.handler,
             *(str(p) for p in artifact.paths)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=str(artifact.paths[0]), env=env,
            # Its own session: Ctrl-C reaches the stack, which stops its environments quietly.
            start_new_session=True)
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True,
                         name=f"env-{spec.short_name}").start()
        threading.Thread(target=sink.pump, args=(self.proc.stderr,), daemon=True,
                         name=f"log-{spec.short_name}").start()

    def init(self) -> None:
        """Wait for the handler's import (Lambda's init phase, bounded as Lambda bounds it)."""
        spec = self.spec
        ready = self._wait(INIT_TIMEOUT_S, "Runtime.InitTimeout")
        if "init_error" in ready:
            self.kill()
            err = ready["init_error"]
            raise FunctionError(spec.logical_id, err["errorType"], err["errorMessage"],
                                ready.get("missing"))

    def _read(self, stream: Any) -> None:
        for line in iter(stream.readline, b""):
            self._lines.put(line)
        self._lines.put(b"")  # the process ended

    def _rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/statm") as fh:
                return int(fh.read().split()[1]) * _PAGE / 2**20
        except (OSError, IndexError, ValueError):
            return 0.0

    def _wait(self, timeout_s: float, timeout_type: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    self.kill()
                    raise FunctionTimeout(self.spec.logical_id, timeout_type,
                                          f"Task timed out after {timeout_s:.2f} seconds") from None
                if self._rss_mb() > self.spec.memory_mb:
                    self.kill()
                    raise FunctionError(self.spec.logical_id, "Runtime.OutOfMemory",
                                        f"Runtime exited: memory exceeded {self.spec.memory_mb} MB"
                                        ) from None
                continue
            if not line:
                code = self.proc.wait()
                raise FunctionError(self.spec.logical_id, "Runtime.ExitError",
                                    f"Runtime exited with status {code}")
            if len(line) > MAX_SYNC_PAYLOAD + 4096:
                raise PayloadTooLarge(self.spec.logical_id, "Function.ResponseSizeTooLarge",
                                      f"Response payload size ({len(line)} bytes) exceeded the "
                                      f"maximum allowed payload size ({MAX_SYNC_PAYLOAD} bytes).")
            doc: dict[str, Any] = json.loads(line)
            return doc

    def invoke(self, request: bytes, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise FunctionError(self.spec.logical_id, "Runtime.ExitError",
                                "The execution environment has exited.") from None
        return self._wait(timeout_s, "Sandbox.Timedout")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    idle_since: float = 0.0  # monotonic time it last went back to its pool

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class FunctionPool:
    """Up to `size` warm environments of one function, created on demand (LIFO reuse)."""

    def __init__(self, spec: FunctionSpec, artifact: Artifact, arn: str, env: dict[str, str],
                 size: int = 4, sink: LogSink | None = None, python: str | None = None):
        self.spec = spec
        self.artifact = artifact
        self._arn = arn
        self._env = env
        self._size = size
        self._sink = sink or LogSink()
        self._python = python or sys.executable
        self._idle: queue.LifoQueue[Environment] = queue.LifoQueue()
        self._all: list[Environment] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False
        self.invocations = 0
        self.cpu_s = 0.0  # summed over invocations, as each environment reports it

    def _environment(self) -> Environment:
        while True:
            try:
                env = self._idle.get_nowait()
            except queue.Empty:
                break
            if env.alive:
                return env
        if self._closed:
            raise FunctionError(self.spec.logical_id, "Runtime.Stopped", "The local stack is stopping.")
        env = Environment(self.spec, self.artifact, self._env, self._sink, self._python)
        with self._lock:
            self._all.append(env)
            if self._closed:  # close() ran while this one started
                env.kill()
        env.init()
        return env

    def warm(self) -> None:
        """Start one environment now (its init), so a first request is not a cold start."""
        with self._slots:
            try:
                self._idle.put(self._environment())
            except FunctionError as exc:
                if not self._closed:
                    log.warning("%s", exc)

    def call(self, event: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """One invocation's outcome: {"result"} or {"error"}, and "missing", the modules the
        function's code tried to import that its artifact lacks (even if the handler caught the
        ImportError). Raises FunctionError when the environment itself failed (init, timeout,
        memory, payload size)."""
        timeout = min(timeout_s, self.spec.timeout_s) if timeout_s else self.spec.timeout_s
        request = json.dumps({
            "event": event, "function_name": self.spec.logical_id, "arn": self._arn,
            "memory_mb": self.spec.memory_mb, "timeout_s": timeout,
            "request_id": str(uuid.uuid4())}).encode() + b"\n"
        if len(request) > MAX_SYNC_PAYLOAD:
            raise PayloadTooLarge(self.spec.logical_id, "RequestEntityTooLargeException",
                                  f"Request must be smaller than {MAX_SYNC_PAYLOAD} bytes for the "
                                  "Invoke operation.")
        with self._slots:
            env = self._environment()
            self.invocations += 1
            try:
                doc = env.invoke(request, timeout)
            except FunctionError:
                env.kill()  # Lambda replaces an environment that timed out or crashed
                with self._lock:
                    if env in self._all:
                        self._all.remove(env)
                raise
            env.idle_since = time.monotonic()
            self._idle.put(env)
        with self._lock:
            self.cpu_s += float(doc.get("cpu_s") or 0.0)
        if doc.get("missing"):
            log.error("%s: its artifact lacks %s (%s)", self.spec.logical_id,
                      ", ".join(doc["missing"]), self.artifact.paths[0])
        return doc

    def invoke(self, event: dict[str, Any], timeout_s: float | None = None) -> Any:
        """The handler's result; raises FunctionError (and its kinds) as Lambda would fail."""
        doc = self.call(event, timeout_s)
        if "error" in doc:
            err = doc["error"]
            raise FunctionError(self.spec.logical_id, err["errorType"], err["errorMessage"],
                                doc.get("missing"))
        return doc["result"]

    @property
    def warm_environments(self) -> int:
        """Environments started and alive (idle or serving)."""
        with self._lock:
            return sum(1 for env in self._all if env.alive)

    def reap(self, idle_s: float, keep: int = 0) -> int:
        """Stop environments idle for more than `idle_s`, keeping the `keep` most recently used,
        as Lambda retires idle environments: an afternoon's bursts no longer leave every
        function's pool at its largest (each environment is a process of 40-120 MB)."""
        taken: list[Environment] = []
        while True:
            try:
                taken.append(self._idle.get_nowait())
            except queue.Empty:
                break
        taken.sort(key=lambda e: e.idle_since, reverse=True)  # most recently used first
        now = time.monotonic()
        stale = [e for i, e in enumerate(taken) if i >= keep and now - e.idle_since > idle_s]
        for env in reversed([e for e in taken if e not in stale]):
            self._idle.put(env)  # the LIFO order again: the most recently used on top
        for env in stale:
            env.kill()
            with self._lock:
                if env in self._all:
                    self._all.remove(env)
        return len(stale)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            envs, self._all = self._all, []
        for env in envs:
            env.kill()
