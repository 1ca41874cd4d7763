"""Statistics checked against scipy and against small cases computed by hand."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from dsv4ctl.analysis import stats


def test_median_ci_order_statistics_by_hand():
    assert stats.median_ci([5, 1, 4, 2, 3]) == (-math.inf, math.inf)  # n < 6: benchstat's ±∞
    assert stats.median_ci([6, 1, 5, 2, 4, 3]) == (1, 6)  # 2 * P(B <= 0) = 2/64 <= 0.05
    # n = 10: 2 * P(B <= 1) = 0.021 <= 0.05 < 2 * P(B <= 2) = 0.109  ->  [x(2), x(9)]
    assert stats.median_ci(list(range(1, 11))) == (2, 9)


def test_median_ci_coverage_against_the_binomial():
    for n in (6, 7, 12, 30, 101):
        lo, hi = stats.median_ci(list(range(n)))
        k = lo + 1
        assert 1 - 2 * scipy_stats.binom.cdf(k - 1, n, 0.5) >= 0.95
        assert 1 - 2 * scipy_stats.binom.cdf(k, n, 0.5) < 0.95  # and no tighter interval would do


def test_mann_whitney_by_hand_and_against_scipy():
    # Complete separation of 4 vs 4: exact two-sided p = 2 / C(8, 4) = 2/70.
    assert stats.mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    a, b = [10.1, 9.8, 10.4, 10.0, 9.9, 10.3], [10.6, 10.2, 10.9, 10.8, 10.5, 11.0]
    assert stats.mann_whitney_p(a, b) == scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert stats.mann_whitney_p([3.0] * 5, [3.0] * 5) == 1.0  # a test error (all equal) is p = 1
    assert stats.mann_whitney_p([], [1.0]) == 1.0


def test_minimum_samples_match_benchstat_and_asv():
    assert stats.min_samples(0.05) == 4  # benchstat: 4 gives 0.0286
    assert stats.min_samples(0.002) == 7  # asv: 7 per side with fully separated samples


def test_wilcoxon_against_scipy():
    diffs = [-1.2, -0.8, -1.5, -0.3, -1.1, 0.2, -0.9, -1.4]
    assert stats.wilcoxon_p(diffs) == scipy_stats.wilcoxon(diffs).pvalue
    assert stats.wilcoxon_p([0.0, 0.0]) == 1.0 and stats.wilcoxon_p([]) is None


def test_runs_needed_grows_with_spread_and_shrinks_with_effect():
    tight = [100 + 0.5 * (i % 3) for i in range(8)]
    loose = [100 + 5 * (i % 3) for i in range(8)]
    assert stats.runs_needed(tight, tight, 5.0, 0.05) == 4
    assert stats.runs_needed(loose, loose, 5.0, 0.05) > stats.runs_needed(tight, tight, 5.0, 0.05)
    assert stats.runs_needed(loose, loose, 1.0, 0.05) > stats.runs_needed(loose, loose, 5.0, 0.05)


def test_the_bootstrap_interval_is_for_a_few_repeats_not_for_thousands_of_runs():
    base = [100.0 + (i % 7) for i in range(stats.BOOTSTRAP_MAX_RUNS + 1)]
    cand = [v * 0.7 for v in base]
    low, high = stats.bootstrap_ratio_ci(base[:6], cand[:6])
    assert low <= 0.7 <= high
    assert stats.bootstrap_ratio_ci(base[:stats.BOOTSTRAP_MAX_RUNS], cand[:stats.BOOTSTRAP_MAX_RUNS]) is not None
    assert stats.bootstrap_ratio_ci(base, cand) is None  # past the cap: compare's rank interval stands alone
    assert stats.bootstrap_ratio_ci(base[:1], cand[:6]) is None
