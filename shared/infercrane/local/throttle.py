"""Token buckets per usage identifier: what an API Gateway usage plan's throttle does.

Each identifier (the authorizer's `usageIdentifierKey`, one per tenant) has a bucket holding up
to `burst` tokens, refilled at `rate` a second; a request takes one token or is refused with the
seconds until the next token, which the gateway sends as `Retry-After`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBuckets:
    def __init__(self, rate: float, burst: float,
                 clock: Callable[[], float] = time.monotonic):
        if rate <= 0 or burst < 1:
            raise ValueError("a throttle needs a positive rate and a burst of at least 1")
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # id -> (tokens, as of)

    def take(self, identifier: str) -> float:
        """0 if the request may pass (a token is taken), else the seconds until it could."""
        with self._lock:
            now = self._clock()
            tokens, since = self._buckets.get(identifier, (self.burst, now))
            tokens = min(self.burst, tokens + (now - since) * self.rate)
            if tokens >= 1:
                self._buckets[identifier] = (tokens - 1, now)
                return 0.0
            self._buckets[identifier] = (tokens, now)
            return (1 - tokens) / self.rate
