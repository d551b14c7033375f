"""How much a capacity figure can be trusted: Wilson score intervals and evidence strength.

A success rate of 3/3 is not better evidence than 970/1000. Every rate carries the 95 % Wilson
score interval (Wilson 1927): unlike the normal approximation it stays inside [0, 1] and is not
degenerate at 0 or n successes, so small groups get honestly wide intervals.
"""

from __future__ import annotations

import math
from typing import Literal

CONFIDENCE = 0.95
# The two-sided 97.5 % standard normal quantile, Phi^-1(0.975).
Z_95 = 1.959963984540054
# Below this many decided attempts (succeeded + failed) a rate is flagged insufficient.
MIN_N_RATE = 10
# Interval widths (hi - lo) that separate strong, moderate and weak evidence.
STRONG_WIDTH = 0.10
MODERATE_WIDTH = 0.25
Strength = Literal["strong", "moderate", "weak", "insufficient"]
STRENGTH_ORDER: dict[str, int] = {"strong": 0, "moderate": 1, "weak": 2, "insufficient": 3}
STRENGTH_RULE = (f"95 % Wilson score interval of succeeded / (succeeded + failed); insufficient "
                 f"below n={MIN_N_RATE}, strong when the interval is at most {STRONG_WIDTH:.2f} "
                 f"wide, moderate up to {MODERATE_WIDTH:.2f}, weak beyond")


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion; None without trials."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError("successes must be between 0 and n")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Clamp float noise at the ends (p = 0 or 1 give exactly 0 or 1 in exact arithmetic).
    return max(0.0, centre - half), min(1.0, centre + half)


def strength(interval: tuple[float, float] | None, n: int) -> Strength:
    if interval is None or n < MIN_N_RATE:
        return "insufficient"
    width = interval[1] - interval[0]
    if width <= STRONG_WIDTH:
        return "strong"
    return "moderate" if width <= MODERATE_WIDTH else "weak"
