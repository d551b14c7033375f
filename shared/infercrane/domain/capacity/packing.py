"""Day rollups' storage form of durations.

A closed UTC day of a tenant is compacted into one day rollup (its hour rollups merged), so a
720 h report reads 30 day items instead of 720 hour items. Each group of a day stores:
- the exact values, as the text `1,2,3`, while the group-day has at most EXACT_PER_DAY of them
  (as an hour keeps up to EXACT_PER_HOUR): decoded, all days in one JSON decode, only for a
  group the report answers exactly. Beyond, the day part is a sketch, so the bytes of a group-day
  stop growing with its attempts;
- a dense DDSketch: the bucket counts from key `lo` up, packed little-endian in base64, decoded
  only for a group the report answers with the sketch.
"""

from __future__ import annotations

import binascii
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infercrane.domain.capacity.durations import RELATIVE_ACCURACY


def pack_counts(counts: Sequence[int]) -> str:
    """Bucket counts as `<width><base64>`: each count little-endian in the fewest bytes (1, 2, 4
    or 8) that hold the largest."""
    width = next(w for w in (1, 2, 4, 8) if max(counts, default=0) < 1 << (8 * w))
    raw = b"".join(c.to_bytes(width, "little") for c in counts)
    return str(width) + binascii.b2a_base64(raw, newline=False).decode("ascii")


LANE_TYPES = {2: "H", 4: "I", 8: "Q"}  # lane bytes -> the array typecode of that size
if any(array(code).itemsize != size for size, code in LANE_TYPES.items()):
    raise ImportError("this platform's array typecodes H/I/Q are not 2/4/8 bytes")


def unpack_lanes(text: str, lane: int) -> tuple[int, int]:
    """(`pack_counts` text as one integer with a `lane`-byte lane a bucket, number of
    buckets)."""
    width = int(text[0])
    raw = binascii.a2b_base64(text[1:])
    size = len(raw) // width
    if width > lane:
        raise ValueError("bucket counts wider than the lanes that add them")
    wide = bytearray(lane * size)
    for j in range(width):  # byte j of every count into byte j of its lane: C-level slices
        wide[j::lane] = raw[j::width]
    return int.from_bytes(wide, "little"), size


@dataclass
class DayDurations:
    """A group-day's durations as stored in a day rollup (see the module docstring)."""

    n: int
    min: int | None
    max: int | None
    values_text: str | None  # `1,2,3`: the exact values, or None beyond EXACT_PER_DAY
    lo: int  # the bucket key of `counts[0]`
    counts: str  # `pack_counts` of the dense bucket counts
    zero: int

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"n": self.n, "min": self.min, "max": self.max, "lo": self.lo,
                               "b": self.counts, "z": self.zero, "a": RELATIVE_ACCURACY}
        if self.values_text is not None:
            doc["v"] = self.values_text
        return doc

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> DayDurations:
        if float(doc["a"]) != RELATIVE_ACCURACY:
            raise ValueError("duration sketch of another relative accuracy")
        return cls(int(doc["n"]), doc.get("min"), doc.get("max"), doc.get("v"), int(doc["lo"]),
                   str(doc["b"]), int(doc["z"]))

