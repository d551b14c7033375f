"""Trace drift: does trace B have the same shape as trace A?

For input tokens, output tokens and inter-arrival times: the two-sample Kolmogorov-Smirnov
statistic D = sup |F_A(x) - F_B(x)| and its two-sided p-value from the asymptotic Kolmogorov
distribution with Stephens' small-sample correction, lambda = (sqrt(ne) + 0.12 + 0.11/sqrt(ne)) D,
ne = n m / (n + m). The request rate (arrivals over each trace's first-to-last arrival span) is
compared by the exact conditional binomial test of two Poisson rates. Peak concurrency and prefix
reuse are single figures without a sampling distribution here: they are compared against a stated
tolerance, and say so.

The comparison is a document (`infercrane.trace.comparison/v1`) carrying both source digests and
its own RFC 8785 digest (`domain/digest.py`), so it is stored and verified like a trace.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.digest import compute_digest
from infercrane.errors import InvalidInput

SCHEMA = "infercrane.trace.comparison/v1"
DEFAULT_SIGNIFICANCE = 0.01
PEAK_CONCURRENCY_TOLERANCE = 0.20  # relative
PREFIX_REUSE_TOLERANCE = 0.05  # absolute, share of prefix blocks
SAME, SHIFTED, NOT_COMPARABLE = "same shape", "shifted", "not comparable"
KS_METHOD = ("two-sample Kolmogorov-Smirnov, two-sided; p-value from the asymptotic Kolmogorov "
             "distribution with Stephens' correction (conservative with tied values)")
RATE_METHOD = ("exact conditional binomial test of two Poisson rates: given all arrivals after the "
               "first of each trace, B's share is Binomial(total, span_B / (span_A + span_B)) "
               "under equal rates; two-sided p sums outcomes no more likely than the observed")


def ks_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """sup_x |F_a(x) - F_b(x)| over the empirical distribution functions (ties handled)."""
    if not a or not b:
        raise ValueError("both samples must be non-empty")
    return ks_sorted(sorted(a), sorted(b))


def ks_sorted(whole: Sequence[float], sample: Sequence[float]) -> float:
    """`ks_statistic` of two samples already sorted ascending, in O(m log n) for a sample of m
    against n: trace selection scores many candidate slices against one sorted window.

    Between two consecutive distinct values of `sample` its distribution function is flat and
    `whole`'s only rises, so the supremum over that stretch is at its ends: just below the next
    sample value (values of `whole` < it) or at the sample value itself (values <= it)."""
    n, m = len(whole), len(sample)
    d = 0.0
    below = 0  # sample values < the current one
    k = 0
    while k < m:
        x = sample[k]
        upto = bisect.bisect_right(sample, x, k)
        # A tie between the samples moves both functions at once.
        d = max(d, abs(below / m - bisect.bisect_left(whole, x) / n),
                abs(upto / m - bisect.bisect_right(whole, x) / n))
        below = k = upto
    return d


def kolmogorov_sf(lam: float) -> float:
    """Q_KS(lambda) = 2 sum_{k>=1} (-1)^(k-1) exp(-2 k^2 lambda^2): P(K > lambda)."""
    if lam < 0.2:
        return 1.0  # the series converges slowly here and its value is 1 within 1e-15
    total = 0.0
    for k in range(1, 101):
        term = 2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-16 * max(total, 1e-300):
            break
    return min(1.0, max(0.0, total))


def ks_2samp(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(D, two-sided p-value)."""
    d = ks_statistic(a, b)
    ne = len(a) * len(b) / (len(a) + len(b))
    root = math.sqrt(ne)
    return d, kolmogorov_sf((root + 0.12 + 0.11 / root) * d)


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_two_sided_p(k: int, n: int, p: float) -> float:
    """Exact two-sided binomial p-value: the mass of outcomes no more likely than k."""
    if n == 0:
        return 1.0
    observed = _log_binom_pmf(k, n, p)
    # A relative tolerance, as exact equality of floating pmfs decides ties arbitrarily.
    limit = observed + 1e-7 * abs(observed) if observed != 0 else 1e-7
    total = sum(math.exp(lp) for i in range(n + 1)
                if (lp := _log_binom_pmf(i, n, p)) <= limit)
    return min(1.0, total)


def _verdict(p: float, significance: float) -> str:
    return SHIFTED if p < significance else SAME


def _inter_arrivals(offsets: Sequence[float]) -> list[float]:
    ordered = sorted(offsets)
    return [b - a for a, b in itertools.pairwise(ordered)]


def _distribution(a: Sequence[float], b: Sequence[float], significance: float) -> dict[str, Any]:
    if not a or not b:
        return {"test": "ks_2samp", "n_a": len(a), "n_b": len(b), "statistic": None,
                "p_value": None, "verdict": NOT_COMPARABLE}
    d, p = ks_2samp(a, b)
    return {"test": "ks_2samp", "n_a": len(a), "n_b": len(b), "statistic": round(d, 9),
            "p_value": p, "verdict": _verdict(p, significance)}


def _rate(offsets: Sequence[float]) -> tuple[int, float] | None:
    """(arrivals after the first, first-to-last span in seconds), or None under two arrivals."""
    if len(offsets) < 2:
        return None
    span = (max(offsets) - min(offsets)) / 1000
    return (len(offsets) - 1, span) if span > 0 else None


def _rate_figure(a: Sequence[float], b: Sequence[float], significance: float) -> dict[str, Any]:
    ra, rb = _rate(a), _rate(b)
    if ra is None or rb is None:
        return {"test": "poisson_rates_conditional_binomial", "a_per_s": None, "b_per_s": None,
                "ratio": None, "p_value": None, "verdict": NOT_COMPARABLE}
    (ka, sa), (kb, sb) = ra, rb
    p = binomial_two_sided_p(kb, ka + kb, sb / (sa + sb))
    rate_a, rate_b = ka / sa, kb / sb
    return {"test": "poisson_rates_conditional_binomial", "a_per_s": round(rate_a, 6),
            "b_per_s": round(rate_b, 6), "ratio": round(rate_b / rate_a, 6),
            "span_a_s": round(sa, 3), "span_b_s": round(sb, 3), "p_value": p,
            "verdict": _verdict(p, significance)}


def _peak_figure(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    pa, pb = a["statistics"]["peak_concurrency"], b["statistics"]["peak_concurrency"]
    timing = sorted({a["timing_source"], b["timing_source"]})
    if not pa or not pb:
        return {"a": pa, "b": pb, "ratio": None, "verdict": NOT_COMPARABLE, "timing": timing}
    ratio = pb / pa
    within = abs(ratio - 1) <= PEAK_CONCURRENCY_TOLERANCE
    return {"a": pa, "b": pb, "ratio": round(ratio, 6), "tolerance": PEAK_CONCURRENCY_TOLERANCE,
            "basis": "relative tolerance (a maximum has no sampling distribution here)",
            "timing": timing, "verdict": SAME if within else SHIFTED}


def _reuse_figure(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    ra, rb = a["statistics"]["block_repeat_ratio"], b["statistics"]["block_repeat_ratio"]
    if ra is None or rb is None:
        return {"a": ra, "b": rb, "difference": None, "verdict": NOT_COMPARABLE,
                "basis": "a trace without prefix block identities has no reuse to compare"}
    diff = rb - ra
    return {"a": ra, "b": rb, "difference": round(diff, 6), "tolerance": PREFIX_REUSE_TOLERANCE,
            "basis": "absolute tolerance on the share of reused prefix blocks",
            "verdict": SAME if abs(diff) <= PREFIX_REUSE_TOLERANCE else SHIFTED}


def _source(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"digest": doc["digest"], "deployment": doc["deployment"], "window": doc["window"],
            "sample_count": doc["sample_count"], "evidence_class": doc["evidence_class"],
            "timing_source": doc["timing_source"]}


def compare_traces(a: Mapping[str, Any], b: Mapping[str, Any], *, significance: float,
                   built_at: datetime, software: str | None = None) -> dict[str, Any]:
    """The comparison document of two (digest-verified) trace documents."""
    if not isinstance(significance, float | int) or not 0 < significance < 0.5:
        raise InvalidInput("significance must be between 0 and 0.5, e.g. 0.01.",
                           field="significance")
    ra, rb = a["records"], b["records"]
    offsets_a = [float(r["offset_ms"]) for r in ra]
    offsets_b = [float(r["offset_ms"]) for r in rb]
    figures = {
        "input_tokens": _distribution([r["input_tokens"] for r in ra],
                                      [r["input_tokens"] for r in rb], significance),
        "output_tokens": _distribution([r["output_tokens"] for r in ra],
                                       [r["output_tokens"] for r in rb], significance),
        "inter_arrival_ms": _distribution(_inter_arrivals(offsets_a), _inter_arrivals(offsets_b),
                                          significance),
        "request_rate": _rate_figure(offsets_a, offsets_b, significance),
        "peak_concurrency": _peak_figure(a, b),
        "prefix_reuse": _reuse_figure(a, b),
    }
    verdicts = {f["verdict"] for f in figures.values()}
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "a": _source(a),
        "b": _source(b),
        "significance": float(significance),
        "methods": {"distributions": KS_METHOD, "request_rate": RATE_METHOD,
                    "rate_span": "first to last arrival of each trace"},
        "figures": figures,
        "verdict": SHIFTED if SHIFTED in verdicts else SAME,
        "build": {"built_at": rfc3339(built_at), "software": software},
    }
    document["digest"] = compute_digest(document)
    return document
