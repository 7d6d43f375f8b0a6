import pytest

from niclab.run.stats import Limits, instability, summarize, t_quantile


def test_t_quantiles_match_the_tables():
    assert t_quantile(95, 2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(99, 4) == pytest.approx(4.604, abs=1e-3)
    assert t_quantile(95, 1000) == pytest.approx(1.962, abs=1e-3)


def test_summary_of_three_runs():
    s = summarize([100.0, 110.0, 90.0], level=95)
    assert (s.n, s.mean, s.median, s.min, s.max) == (3, 100.0, 100.0, 90.0, 110.0)
    assert s.stdev == pytest.approx(10.0)
    assert s.cv_pct == pytest.approx(10.0)
    half = 4.302653 * 10.0 / 3**0.5
    assert (s.ci_low, s.ci_high) == (pytest.approx(100 - half, rel=1e-6), pytest.approx(100 + half, rel=1e-6))
    assert s.ci_width_pct == pytest.approx(2 * half, rel=1e-6)
    assert s.samples == [100.0, 110.0, 90.0]


def test_one_sample_has_no_spread_or_interval():
    s = summarize([42.0])
    assert (s.mean, s.stdev, s.cv_pct, s.ci_low, s.ci_width_pct) == (42.0, None, None, None, None)
    assert instability(s, Limits(max_cv_pct=1, max_ci_width_pct=1)) == []


def test_unstable_results_are_flagged_with_the_reason():
    s = summarize([100.0, 130.0, 70.0])
    reasons = instability(s, Limits(max_cv_pct=10, max_ci_width_pct=20), ["netperf's target was missed"])
    assert reasons[0] == "netperf's target was missed"
    assert reasons[1] == "CV 30.0 % is above the accepted 10 %"
    assert reasons[2].startswith("the 95 % interval is ±74.5 % wide, above the accepted ±10 %")
    assert instability(summarize([100.0, 101.0, 99.0]), Limits(max_cv_pct=10, max_ci_width_pct=20)) == []


def test_no_samples():
    with pytest.raises(ValueError):
        summarize([])
