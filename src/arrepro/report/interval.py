"""Welch's t interval on the difference of two means over seeds, for the claims' verdicts
(arrepro.report.verdicts), with the Student t quantile it needs.

No statistics package is a dependency of this project, so the quantile is computed here: the t
density is integrated from 0 by composite Simpson's rule on a fixed fine grid (the density is smooth
and, for the quantiles a 95% interval needs, the upper limit is at most ~13) and the level is
found by bisection. Checked against the tabled values (tests/test_claims.py): 12.706 (1 degree of
freedom), 4.303 (2), 2.776 (4), 2.228 (10), 1.960 (infinite), and the closed form for 2 degrees
of freedom. Welch's degrees of freedom are fractional, so a table alone would not do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

LEVEL = 0.95           # the two-sided level of every interval the claims use
NORMAL_DF = 1e7        # beyond this many degrees of freedom the normal quantile (differs < 1e-6)
_SIMPSON_STEPS = 4000  # even; the integration grid on [0, t]


def _t_cdf_upper_half(t: float, df: float) -> float:
    """P(0 <= T <= t) for Student's t with ``df`` degrees of freedom (t >= 0)."""
    if t <= 0:
        return 0.0
    x = np.linspace(0.0, t, _SIMPSON_STEPS + 1)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    f = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    w = np.ones_like(x)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return float((t / _SIMPSON_STEPS) / 3.0 * np.dot(w, f))


@lru_cache(maxsize=4096)
def _t_quantile(p: float, df: float) -> float:
    if df >= NORMAL_DF:
        return NormalDist().inv_cdf(p)
    target = p - 0.5
    lo, hi = 0.0, 2.0
    while _t_cdf_upper_half(hi, df) < target:  # bracket (df >= 1: hi <= 64 for p <= 0.995)
        lo, hi = hi, 2 * hi
    for _ in range(60):  # to well below 1e-9
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf_upper_half(mid, df) < target else (lo, mid)
    return (lo + hi) / 2


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 0.9999) of Student's t with ``df`` >= 1 degrees of freedom
    (fractional allowed; ``math.inf``: the normal's)."""
    if not 0.5 < p < 0.9999:
        raise ValueError(f"quantile level {p} outside (0.5, 0.9999)")
    if not df >= 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    return _t_quantile(float(p), round(float(df), 9) if math.isfinite(df) else math.inf)


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
    deviation (ddof 1) and number of seeds: d +- t(df) * sqrt(sd_a^2/n_a + sd_b^2/n_b), df by
    Welch-Satterthwaite. Neither side's variance is assumed equal to the other's (a model at
    chance varies little over seeds, one that learns on some seeds a lot)."""
    d = mean_a - mean_b
    if n_a < 2 or n_b < 2:
        return Interval(d, -math.inf, math.inf, 0.0)
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se2 = va + vb
    if se2 == 0.0:  # both sides identical on every seed: the interval is the point
        return Interval(d, d, d, math.inf)
    df = se2 ** 2 / (va ** 2 / (n_a - 1) + vb ** 2 / (n_b - 1))
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(se2)
    return Interval(d, d - half, d + half, df)
