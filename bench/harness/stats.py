"""Summaries that benchmark reports share: median and spread, weighted rates, ratios."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (q in [0, 1])."""
    if not sorted_values:
        raise ValueError("no values")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median with its spread: min/max and the interquartile range, plus the raw runs."""
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "q1": None, "q3": None, "runs": []}
    s = sorted(float(v) for v in values)
    return {"n": len(s), "median": statistics.median(s), "min": s[0], "max": s[-1],
            "q1": quantile(s, 0.25), "q3": quantile(s, 0.75), "runs": [float(v) for v in values]}


def weighted_rate(tokens: Sequence[float], seconds: Sequence[float]) -> float | None:
    """Sum of tokens over sum of seconds: a long answer weighs more than a short one, unlike a
    median of per-answer rates. None when nothing was timed."""
    if len(tokens) != len(seconds):
        raise ValueError("tokens and seconds differ in length")
    total_s = sum(seconds)
    return sum(tokens) / total_s if total_s > 0 else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def median_of_dicts(dicts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-key median over snapshots (keys missing from some snapshots use the ones present)."""
    keys = sorted({k for d in dicts for k in d})
    return {k: statistics.median([float(d[k]) for d in dicts if k in d]) for k in keys}
