"""One local Lambda execution environment: the runtime loop around one function's handler.

Run as `python -I -S lambda_worker.py HANDLER PATH...`: isolated from the caller's environment
and with no site-packages, so only the standard library and the artifact's folders (the function's
folder, then its layers' python/ folders, as Lambda orders /var/task and /opt/python) can be
imported. It imports the handler once (Lambda's init phase), then serves one invocation per line
of stdin and answers one JSON line per invocation on its own channel. What the function prints
goes to stderr (the stack filters it). Standard library only: this file is the local stand-in for
Lambda's runtime interface client, not part of any artifact.

An import the function's own code (its folder or the infercrane package) attempts and nothing on
the path can satisfy is reported by name with the invocation, even when the handler caught the
error (Powertools' batch processor turns a record's exception into a batch item failure).
"""

from __future__ import annotations

import importlib
import importlib.abc
import json
import os
import sys
import time
import traceback
from typing import Any

_INTERNAL = ("<frozen importlib", os.path.abspath(__file__))


class _MissingImports(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: consulted only when no other finder found the module."""

    def __init__(self, roots: tuple[str, ...]):
        self.roots = roots
        self.names: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
            frame = frame.f_back  # type: ignore[assignment]
        filename = frame.f_code.co_filename if frame is not None else ""
        if filename.startswith(self.roots):
            self.names.add(fullname)


class Context:
    """The fields of Lambda's context object the handlers and Powertools read."""

    def __init__(self, request: dict[str, Any]):
        self.function_name = request["function_name"]
        self.function_version = "$LATEST"
        self.invoked_function_arn = request["arn"]
        self.memory_limit_in_mb = request["memory_mb"]
        self.aws_request_id = request["request_id"]
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + request["timeout_s"]

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _error(exc: BaseException, error_type: str | None = None) -> dict[str, Any]:
    return {"errorType": error_type or type(exc).__name__, "errorMessage": str(exc),
            "stackTrace": traceback.format_exception(exc)[-8:]}


def main() -> int:
    handler_name, paths = sys.argv[1], sys.argv[2:]
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # print() and EMF metric lines of the function: to stderr, never the channel
    sys.stdout = sys.stderr
    sys.path[:0] = paths
    roots = (paths[0] + os.sep, *(os.path.join(p, "infercrane") + os.sep for p in paths[1:]))
    missing = _MissingImports(roots)
    sys.meta_path.append(missing)

    def send(doc: dict[str, Any]) -> None:
        try:
            line = json.dumps(doc)
        except (TypeError, ValueError) as exc:
            line = json.dumps({"error": _error(exc, "Runtime.MarshalError"),
                               "missing": sorted(missing.names)})
        channel.write(line + "\n")
        channel.flush()

    module_name, _, attr = handler_name.rpartition(".")
    try:
        handler = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else "Runtime.InitError"
        err = _error(exc, kind)
        err["errorMessage"] = f"Unable to import module '{module_name}': {exc}"
        send({"init_error": err, "missing": sorted(missing.names)})
        return 1
    send({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        missing.names.clear()
        cpu = time.process_time()
        try:
            out: dict[str, Any] = {"result": handler(request["event"], Context(request))}
        except Exception as exc:
            out = {"error": _error(exc)}
        out["missing"] = sorted(missing.names)
        # The invocation's CPU seconds (this process, every thread), which the stack sums per
        # function for `local serve --count-requests`: Lambda's GB-s, measured.
        out["cpu_s"] = time.process_time() - cpu
        send(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
