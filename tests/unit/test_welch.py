"""Welch's p-value without scipy.stats' per-call overhead is scipy's own, to the last bit."""

import math
import random

import pytest
from scipy import stats

from niclab.ui.report.welch import welch_p_value


def _same(got: float, expected: float) -> bool:
    return got == expected or (math.isnan(got) and math.isnan(expected))


def _samples(rng: random.Random) -> tuple[list[float], list[float]]:
    n1, n2 = rng.randint(2, 12), rng.randint(2, 12)
    scale = 10 ** rng.uniform(-6, 9)
    base = [round(rng.gauss(scale, scale * rng.random()), rng.randint(0, 6)) for _ in range(n1)]
    new = [round(rng.gauss(scale * 1.01, scale * rng.random()), 2) for _ in range(n2)]
    return base, new


@pytest.mark.parametrize(
    ("base", "new"),
    [
        ([5.0, 5.0, 5.0], [5.0, 5.0]),  # no variance, same mean: NaN
        ([5.0, 5.0], [7.0, 7.0, 7.0]),  # no variance, different means: 0
        ([5.0, 5.0, 5.0], [5.0, 6.0]),  # no variance on one side
        ([900, 1000], [901.5, 999.25]),  # whole numbers
        ([1e-9, 2e-9, 1.5e-9], [1e12, 1e12 + 1]),
        ([378.6, 377.9, 379.2], [93.08, 94.1, 92.7]),
    ],
)
def test_edge_cases_are_scipys(base: list[float], new: list[float]) -> None:
    expected = float(stats.ttest_ind(base, new, equal_var=False).pvalue)
    assert _same(welch_p_value(base, new), expected)


def test_random_samples_are_scipys_to_the_bit() -> None:
    rng = random.Random(31)
    for _ in range(2000):
        base, new = _samples(rng)
        assert _same(welch_p_value(base, new), float(stats.ttest_ind(base, new, equal_var=False).pvalue)), (base, new)
