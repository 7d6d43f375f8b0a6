"""Statistics over repeated runs: center, spread, a Student-t interval of the mean, stability.

Every sample is kept; a summary says how far to trust the mean. A result is
flagged unstable, not hidden, when its coefficient of variation or the width
of its confidence interval exceeds what the scenario accepts, or when the
tool itself doubted a run (a netperf confidence miss).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    stdev: float | None  # sample standard deviation (n - 1); None for one sample
    cv_pct: float | None  # stdev / |mean| in %
    min: float
    max: float
    ci_level: float  # e.g. 95
    ci_low: float | None  # Student-t interval of the mean; None for one sample
    ci_high: float | None
    samples: list[float] = field(default_factory=list)

    @property
    def ci_width_pct(self) -> float | None:
        """The interval's full width in % of the mean (as netperf's -I width)."""
        if self.ci_low is None or self.ci_high is None or self.mean == 0:
            return None
        return 100.0 * (self.ci_high - self.ci_low) / abs(self.mean)

    def to_dict(self) -> dict:
        return asdict(self) | {"ci_width_pct": self.ci_width_pct}


def t_quantile(level_pct: float, df: int) -> float:
    """The two-sided Student-t critical value for a confidence level in %."""
    from scipy import stats as scipy_stats  # here, not at the top: importing it costs 0.6 s of every run's start

    return float(scipy_stats.t.ppf(0.5 + level_pct / 200.0, df))


def summarize(samples: list[float], level: float = 95.0) -> Summary:
    if not samples:
        raise ValueError("no samples to summarize")
    n = len(samples)
    mean = statistics.fmean(samples)
    if n == 1:
        return Summary(1, mean, mean, None, None, mean, mean, level, None, None, list(samples))
    stdev = statistics.stdev(samples)
    half = t_quantile(level, n - 1) * stdev / math.sqrt(n)
    cv = 100.0 * stdev / abs(mean) if mean else None
    return Summary(
        n,
        mean,
        statistics.median(samples),
        stdev,
        cv,
        min(samples),
        max(samples),
        level,
        mean - half,
        mean + half,
        list(samples),
    )


@dataclass(frozen=True)
class Limits:
    """What a scenario accepts as stable (None: no limit)."""

    max_cv_pct: float | None = None
    max_ci_width_pct: float | None = None


def instability(summary: Summary, limits: Limits, warnings: Sequence[str] = ()) -> list[str]:
    """Why this result should not be trusted as it stands (empty when it is stable)."""
    reasons = list(dict.fromkeys(warnings))
    if limits.max_cv_pct is not None and summary.cv_pct is not None and summary.cv_pct > limits.max_cv_pct:
        reasons.append(f"CV {summary.cv_pct:.1f} % is above the accepted {limits.max_cv_pct:g} %")
    width = summary.ci_width_pct
    if limits.max_ci_width_pct is not None and width is not None and width > limits.max_ci_width_pct:
        reasons.append(
            f"the {summary.ci_level:g} % interval is ±{width / 2:.1f} % wide, above the accepted "
            f"±{limits.max_ci_width_pct / 2:g} %"
        )
    return reasons
