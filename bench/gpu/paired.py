"""Ratios of two timings taken in turns (issue 38: goals of 0.98x and 1.02 that one pooled row
cannot show when identical kernels spread +-16 % between rows).

A and B run alternately, as blocks of steps in one process or as whole processes, and each pair of
turns gives one ratio. What drifts over a run (clocks, temperature, the host's other work) moves
both turns of a pair alike, so the median of the pairs' ratios is steadier than the ratio of two
pooled medians, and the pairs' spread says whether a goal holds beyond the noise.
"""
from __future__ import annotations

import statistics


def paired_ratios(numerators: list[float], denominators: list[float]) -> dict:
    """numerators[i] / denominators[i] for each pair of turns: their median, quartiles and range.

    The quartiles interpolate between the pairs (statistics.quantiles, inclusive: a quarter of the
    way from the lowest to the highest of two)."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError(f"paired_ratios: {len(numerators)} and {len(denominators)} turns; need as many, at least one")
    ratios = [n / d for n, d in zip(numerators, denominators)]
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
    return {"pairs": len(ratios), "median": statistics.median(ratios), "q1": quartiles[0], "q3": quartiles[2],
            "low": min(ratios), "high": max(ratios), "ratios": ratios}


def verdict(summary: dict, goal: float, higher_is_better: bool) -> str:
    """`met` when the quartile on the worse side meets the goal, `missed` when the one on the better
    side misses it, else `within noise` (the median alone says which side it leans to)."""
    worse, better = (summary["q1"], summary["q3"]) if higher_is_better else (summary["q3"], summary["q1"])

    def meets(value: float) -> bool:
        return value >= goal if higher_is_better else value <= goal

    if meets(worse):
        return "met"
    if not meets(better):
        return "missed"
    return f"within noise (median {'meets' if meets(summary['median']) else 'misses'} it)"
