"""Welch's t interval on the difference of two means over seeds, for the claims' verdicts
(arrepro.report.verdicts), from each side's mean, standard deviation and seed count (what a
best-table row records): the Student t quantile is scipy.stats' (``t.ppf``, at Welch-Satterthwaite's
fractional degrees of freedom). scipy offers Welch's test from these statistics
(``ttest_ind_from_stats(..., equal_var=False)``) but not its interval; tests/test_claims.py checks
that this interval's edges are where that test's p-value is 1 - LEVEL.

**A side with no spread.** Seeds that agree exactly (three at 100%, or three at one number near
chance) are no evidence that the side cannot vary: its sample standard deviation is 0 and, with
the other side's also 0, the interval was the point itself ("+75.0 points, 95% interval +75.0 to
+75.0"). Each side's standard deviation is therefore taken as at least ``SD_FLOOR``, 1 point of
accuracy: about the largest seed-to-seed standard deviation measured on the demo for a side that
settled, at 100% or at chance (docs/demo.md's run, three seeds each: attention with a conv on V at
chance 22.7-24.5%, 0.96 points; 1-layer attention 26.4-28.1%, 0.89; with a conv on Q, K and V
99.3-100%, 0.36), a tenth of the smallest difference that earns a verdict (MIN_DIFF) and far below
the spread of a model that learns on some seeds only (Mamba 1x32, 76.6-93.2%: 8.5 points). It
widens only intervals that claimed more certainty than three seeds give; a side's own larger
spread is used as it is, and more seeds still narrow the interval. So the floor decides two
flat sides 8 points apart by their seed count: on 3 seeds a side the interval is +5.7 to +10.3
points (not within +-10: not alike), from 4 seeds on it is within (+6.3 to +9.7 on 4): alike.

**Refused**: a mean or standard deviation that is not a finite number (a NaN spread would get no
floor and an interval of NaN to NaN): a ValueError naming it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


LEVEL = 0.95           # the two-sided level of every interval the claims use
SD_FLOOR = 0.01        # the least standard deviation over seeds a side is taken to have (docstring)


@dataclass(frozen=True)
class Interval:
    """A two-sided interval on ``diff`` = mean(a) - mean(b); ``lo`` > 0 or ``hi`` < 0 excludes no
    difference. Infinite where a side has fewer than 2 seeds (no spread to estimate)."""
    diff: float
    lo: float
    hi: float
    df: float

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def within(self, bound: float) -> bool:
        return -bound <= self.lo and self.hi <= bound


def welch(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int,
          level: float = LEVEL) -> Interval:
    """Welch's t interval for the difference of two means from each side's mean, sample standard
    deviation (ddof 1; at least SD_FLOOR) and number of seeds: d +- t(df) * sqrt(sd_a^2/n_a +
    sd_b^2/n_b), df by Welch-Satterthwaite. Neither side's variance is assumed equal to the
    other's (a model at chance varies little over seeds, one that learns on some seeds a lot)."""
    bad = [f"{k} {v}" for k, v in (("mean of a", mean_a), ("sd of a", sd_a), ("mean of b", mean_b), ("sd of b", sd_b))
           if not math.isfinite(v)]
    if bad:
        raise ValueError(f"Welch's interval: {', '.join(bad)} is not a finite number")
    d = mean_a - mean_b
    if n_a < 2 or n_b < 2:
        return Interval(d, -math.inf, math.inf, 0.0)
    va, vb = max(sd_a, SD_FLOOR) ** 2 / n_a, max(sd_b, SD_FLOOR) ** 2 / n_b
    se2 = va + vb
    df = se2 ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    from scipy import stats  # not at the top: the Snakefile loads this module, and scipy.stats costs ~1 s a start

    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(se2)
    return Interval(d, d - half, d + half, df)
