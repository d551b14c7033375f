"""One botocore session per process, for every AWS client: the container's and pynamodb's.

A botocore session loads the endpoint, partition, retry and service data on its first client;
clients created from the same session reuse them. A fresh session per client (what
`boto3.session.Session()` per service and pynamodb's `get_session()` per model did) cost a cold
start ~70 ms of CPU for every client after the first (make bench's cold starts). Clients come
straight from botocore: the adapters call client methods only, so boto3 is not imported at all.
"""

from __future__ import annotations

import threading
from typing import Any

import botocore.session


class _SharedSession(botocore.session.Session):
    """Creates clients one at a time: botocore clients are thread-safe, sessions are not (their
    components are built lazily), and a function's threads may create clients at once."""

    def __init__(self) -> None:
        super().__init__()
        self._create_lock = threading.Lock()

    def create_client(self, *args: Any, **kwargs: Any) -> Any:
        with self._create_lock:
            return super().create_client(*args, **kwargs)


_session: _SharedSession | None = None
_lock = threading.Lock()


def shared_session() -> botocore.session.Session:
    """The process's botocore session (created on first use)."""
    global _session
    with _lock:
        if _session is None:
            _session = _SharedSession()
        return _session


def forget_shared_session() -> None:
    """Let the next client start a new session. Only for harnesses that install botocore handlers
    per run (moto's in-process mock, a bench's canned answers): a session copies the built-in
    handlers when it is created, so clients of an older session never see the new ones."""
    global _session
    with _lock:
        _session = None
