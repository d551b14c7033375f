"""Exact duration summaries carry their bucket keys, so a report turns them into a sketch by
counting keys. Oracle: ddsketch's own LogarithmicMapping, value by value."""

from __future__ import annotations

import json
import random
from collections import Counter

from ddsketch.mapping import LogarithmicMapping

from infercrane.domain.capacity import RELATIVE_ACCURACY, DurationMerge, DurationSummary


def summary(values: list[int]) -> DurationSummary:
    d = DurationSummary()
    for v in values:
        d.add(v)
    return d


def test_merged_exact_summaries_bin_as_the_mapping_bins_each_value() -> None:
    rng = random.Random(3)
    parts = [[rng.choice([0, rng.randrange(1, 3_600_000)]) for _ in range(rng.randrange(1, 60))]
             for _ in range(40)]
    merged = DurationMerge()
    for values in parts:
        merged.add_hour(DurationSummary.from_document(json.loads(json.dumps(summary(values).to_document()))))
    assert merged.exact
    sketch = merged.finish(0)  # past the exact bound: the keys counted into buckets
    mapping = LogarithmicMapping(RELATIVE_ACCURACY)
    flat = [v for values in parts for v in values]
    assert {k: c for k, c in sketch.bins.items() if c} == dict(
        Counter(mapping.key(v) for v in flat if v > 0))
    assert sketch.zero == sum(1 for v in flat if v <= 0)
    assert sketch.n == len(flat)


def test_rollups_stored_without_keys_read_the_same() -> None:
    values = [0, 5, 17, 17, 250_000, 3]
    doc = summary(values).to_document()
    assert doc["k"] == sorted(LogarithmicMapping(RELATIVE_ACCURACY).key(v) for v in values if v)
    old = {k: v for k, v in doc.items() if k != "k"}
    a, b = DurationSummary.from_document(doc), DurationSummary.from_document(old)
    a.to_sketch()
    b.to_sketch()
    assert (a.bins, a.zero) == (b.bins, b.zero)
