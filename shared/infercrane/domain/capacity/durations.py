"""Durations (finished - started) of attempts: exact while small, a DDSketch-style log-bucket
histogram beyond, mergeable either way (`DurationSummary`)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from ddsketch.mapping import LogarithmicMapping

# Duration summaries. DDSketch's relative-error guarantee: every reported quantile q is within
# RELATIVE_ACCURACY of the true value at the same rank (|estimate - x| <= alpha * x).
RELATIVE_ACCURACY = 0.01

MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)


@dataclass
class DurationSummary:
    """A mergeable summary of durations in milliseconds.

    Exact (`values`) while small; otherwise a DDSketch: counts per logarithmic bucket of
    `ddsketch.mapping.LogarithmicMapping(RELATIVE_ACCURACY)` (the mapping `ddsketch.DDSketch`
    uses), plus a zero bucket. Summaries are merged by `DurationMerge`, which adds bucket counts,
    so merging is exact and order-independent.
    An exact summary also carries the bucket key of each positive value (`keys`, computed once
    when the value is added and stored with the rollup), so turning thousands of exact values
    into a sketch when a report merges them is a count of keys, not a logarithm per value.
    """

    values: list[int] | None = field(default_factory=list)
    bins: dict[int, int] = field(default_factory=dict)
    zero: int = 0
    n: int = 0
    min: int | None = None
    max: int | None = None
    keys: list[int] | None = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.values is not None

    def add(self, ms: int) -> None:
        self.n += 1
        self.min = ms if self.min is None else min(self.min, ms)
        self.max = ms if self.max is None else max(self.max, ms)
        if self.values is not None and self.keys is not None:
            self.values.append(ms)
            if ms > 0:
                self.keys.append(MAPPING.key(ms))
        else:
            self._bin(ms, 1)

    def _bin(self, ms: float, count: int) -> None:
        if ms <= 0:
            self.zero += count
        else:
            key = MAPPING.key(ms)
            self.bins[key] = self.bins.get(key, 0) + count

    def _bin_exact(self, values: list[int], keys: list[int]) -> None:
        """Count exact values into the buckets: `keys` are their positive values' bucket keys,
        the rest (zero or negative) go to the zero bucket."""
        for key, count in Counter(keys).items():
            self.bins[key] = self.bins.get(key, 0) + count
        self.zero += len(values) - len(keys)

    def to_sketch(self) -> None:
        if self.values is not None:
            self._bin_exact(self.values, self.keys or [])
            self.values = self.keys = None

    def compact(self, exact_limit: int) -> DurationSummary:
        if self.values is not None and len(self.values) > exact_limit:
            self.to_sketch()
        return self

    def quantile_ms(self, q: float) -> float | None:
        if self.n == 0:
            return None
        rank = math.floor(q * (self.n - 1))
        if self.values is not None:
            return float(sorted(self.values)[rank])
        if rank < self.zero:
            return 0.0
        keys = sorted(self.bins)
        # cumulative[j]: values at or below bucket keys[j - 1]; the rank's bucket is the first
        # whose cumulative count passes the rank.
        cumulative = list(accumulate(map(self.bins.__getitem__, keys), initial=self.zero))
        j = bisect_right(cumulative, rank)
        if j > len(keys):
            return float(self.max or 0)
        value = MAPPING.value(keys[j - 1])
        return float(min(max(value, self.min or 0), self.max or value))

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"n": self.n, "min": self.min, "max": self.max}
        if self.values is not None:
            doc["v"] = sorted(self.values)
            doc["k"] = sorted(self.keys or [])
        else:
            doc["b"] = [[k, c] for k, c in sorted(self.bins.items())]
            doc["z"] = self.zero
            doc["a"] = RELATIVE_ACCURACY
        return doc

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> DurationSummary:
        if "v" in doc:
            values = list(map(int, doc["v"]))
            # Rollups written before keys were stored: computed here, once.
            keys = (list(map(int, doc["k"])) if "k" in doc
                    else [MAPPING.key(v) for v in values if v > 0])
            return cls(values=values, n=int(doc["n"]), min=doc.get("min"), max=doc.get("max"),
                       keys=keys)
        if float(doc.get("a", RELATIVE_ACCURACY)) != RELATIVE_ACCURACY:
            # Sketches of another accuracy do not merge; the aggregator rewrites them.
            raise ValueError("duration sketch of another relative accuracy")
        return cls(values=None, bins={int(k): int(c) for k, c in doc["b"]}, zero=int(doc["z"]),
                   n=int(doc["n"]), min=doc.get("min"), max=doc.get("max"))

