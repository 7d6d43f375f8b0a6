"""Welch's two-sample t-test, the p-value only, without scipy.stats' per-call overhead.

The same arithmetic as scipy 1.17 on the same numpy arrays, so the p-values are scipy's to the last bit
(tests/unit/test_welch.py); scipy.stats.ttest_ind's checks cost about a millisecond a call, which a
comparison of 20,000 cells makes per metric and cell (docs/results.md, "Reading big runs").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import stdtr


def _var_and_mean(samples: Sequence[float]) -> tuple[np.floating, np.floating, int]:
    x = np.asarray(samples, dtype=np.float64)
    n = x.shape[0]
    count = np.float64(n)
    var = np.mean((x - np.mean(x, keepdims=True)) ** 2) * (count / (count - 1))
    return var, np.mean(x), n


def welch_p_value(base: Sequence[float], new: Sequence[float]) -> float:
    """The two-sided p-value of Welch's t-test of two samples of at least two values each; NaN when both
    have no variance and the same mean (as scipy.stats.ttest_ind(base, new, equal_var=False) says)."""
    v1, m1, n1 = _var_and_mean(base)
    v2, m2, n2 = _var_and_mean(new)
    vn1, vn2 = v1 / n1, v2 / n2
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (vn1 + vn2) ** 2 / (vn1**2 / (n1 - 1) + vn2**2 / (n2 - 1))
        t = np.divide(m1 - m2, np.sqrt(vn1 + vn2))
    if np.isnan(df):  # no variance on either side: any df will do, scipy takes 1
        df = np.float64(1.0)
    return float(2 * stdtr(df, -np.abs(t)))
