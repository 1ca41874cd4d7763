"""The standard-library statistics (analysis/rank_tests.py, analysis/stats.py) against scipy.stats, which stays a
test dependency: the same p-values and intervals to 1e-9 (relative) on random samples with and without ties, and
zeros among paired differences; the order statistics of the median's interval identical to the scipy computation
they replace; the bootstrap identical to scipy.stats.bootstrap's; and none of compare's statistics imports scipy."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from dsv4ctl.analysis import rank_tests, stats

REL = 1e-9


def close(mine: float, theirs: float) -> bool:
    return mine == theirs or abs(mine - theirs) <= REL * abs(theirs)


def scipy_median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """stats.median_ci as it was written with scipy (the oracle)."""
    n = len(values)
    ks = np.arange(1, n // 2 + 1)
    ok = ks[2 * scipy_stats.binom.cdf(ks - 1, n, 0.5) <= 1 - confidence] if n else ks
    if not len(ok):
        return (-math.inf, math.inf)
    k = int(ok.max())
    ordered = sorted(values)
    return (ordered[k - 1], ordered[n - k])


continuous = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False)
tied = st.integers(0, 5).map(float)  # few distinct values: ties nearly always
values = st.one_of(continuous, tied)


def samples(most: int):
    return st.one_of(st.lists(continuous, min_size=1, max_size=most), st.lists(tied, min_size=1, max_size=most),
                     st.lists(values, min_size=1, max_size=most))


@settings(max_examples=300, deadline=None)
@given(samples(25), samples(25), st.sampled_from([0.0, 0.5, 3.0]))
def test_mann_whitney_matches_scipy(a, b, shift):
    b = [v + shift for v in b]
    theirs = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    assert close(stats.mann_whitney_p(a, b), 1.0 if math.isnan(theirs) else theirs)


@pytest.mark.parametrize("n1, n2", [(1, 1), (3, 40), (8, 8), (8, 9), (9, 9), (8, 300), (30, 30), (200, 150)])
def test_mann_whitney_both_methods_at_their_borders(n1, n2):
    """Exact up to 8 a side with no ties, normal past it (and with ties at any size)."""
    rng = np.random.default_rng(n1 * 1000 + n2)
    for a, b in ((rng.normal(0, 1, n1), rng.normal(0.4, 1, n2)),
                 (rng.integers(0, 4, n1).astype(float), rng.integers(1, 5, n2).astype(float))):
        theirs = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
        assert close(stats.mann_whitney_p(list(a), list(b)), theirs)


def test_mann_whitney_exact_counts_are_the_null_distribution():
    """Every ordering of 3 vs 4 values counted by brute force: the Gaussian binomial's coefficients."""
    from itertools import combinations

    brute = [0] * 13
    for left in combinations(range(7), 3):
        brute[sum(1 for i in left for j in set(range(7)) - set(left) if i > j)] += 1
    assert rank_tests.mwu_counts(3, 4, 12) == brute


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(continuous, min_size=1, max_size=70), st.lists(tied, min_size=1, max_size=70),
                 st.lists(st.integers(-3, 3).map(float), min_size=1, max_size=20)))
def test_wilcoxon_matches_scipy(differences):
    if not any(differences):
        assert stats.wilcoxon_p(differences) == 1.0
        return
    theirs = float(scipy_stats.wilcoxon(differences, zero_method="wilcox").pvalue)
    assert close(stats.wilcoxon_p(differences), theirs)


@pytest.mark.parametrize("n", [5, 13, 14, 50, 51, 120])
def test_wilcoxon_exact_permutation_and_normal_at_their_borders(n):
    rng = np.random.default_rng(n)
    plain = list(rng.normal(0.3, 1, n))
    with_ties = [float(v) for v in rng.integers(-2, 4, n)]  # ties and zeros: permutation up to 13, else normal
    for diffs in (plain, with_ties):
        theirs = float(scipy_stats.wilcoxon(diffs, zero_method="wilcox").pvalue)
        assert close(stats.wilcoxon_p(diffs), theirs)


@settings(max_examples=200, deadline=None)
@given(st.lists(values, min_size=0, max_size=400), st.sampled_from([0.9, 0.95, 0.99]))
def test_median_ci_is_the_scipy_order_statistics(sample, confidence):
    assert stats.median_ci(sample, confidence) == scipy_median_ci(sample, confidence)


@pytest.mark.parametrize("n", [1, 2, 7, 60, 999, rank_tests.EXACT_BINOMIAL_N, rank_tests.EXACT_BINOMIAL_N + 1,
                               40_000, 300_000])
def test_binomial_tail_matches_scipy(n):
    spread = max(1, int(math.sqrt(n)))
    for k in {0, n // 2 - 4 * spread, n // 2 - 2 * spread, n // 2 - spread, n // 2, n - 1, n}:
        if k >= 0:
            assert close(rank_tests.binomial_cdf(k, n), float(scipy_stats.binom.cdf(k, n, 0.5)))
    ks = np.arange(1, n // 2 + 1)
    ok = ks[2 * scipy_stats.binom.cdf(ks - 1, n, 0.5) <= 0.05]
    assert rank_tests.median_rank(n, 0.05) == (int(ok.max()) if len(ok) else 0)


@settings(max_examples=100, deadline=None)
@given(st.floats(-30, 30, allow_nan=False))
def test_normal_tail_matches_scipy_ndtr(z):
    theirs = float(scipy_stats.norm.sf(z))
    assert close(rank_tests.normal_sf(z), theirs) or abs(rank_tests.normal_sf(z) - theirs) < 1e-300


@pytest.mark.parametrize("alpha, power", [(0.05, 0.8), (0.01, 0.9), (0.2, 0.5), (0.002, 0.8)])
def test_runs_needed_quantiles_match_scipy(alpha, power):
    from statistics import NormalDist

    mine = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    assert close(mine, float(scipy_stats.norm.ppf(1 - alpha / 2) + scipy_stats.norm.ppf(power)))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(1e-3, 1e3), min_size=2, max_size=30),
       st.lists(continuous, min_size=2, max_size=30), st.sampled_from([0.9, 0.95]))
def test_bootstrap_is_scipy_bootstrap(a, b, confidence):
    def ratio(x, y, axis=-1):
        below = np.median(x, axis=axis)
        return np.median(y, axis=axis) / np.where(below == 0, np.nan, below)

    with np.errstate(invalid="ignore", divide="ignore"):
        result = scipy_stats.bootstrap((np.asarray(a), np.asarray(b)), ratio, vectorized=True, paired=False,
                                       confidence_level=confidence, n_resamples=stats.BOOTSTRAP_RESAMPLES,
                                       method="percentile", rng=np.random.default_rng(stats.BOOTSTRAP_SEED))
    ends = (float(result.confidence_interval.low), float(result.confidence_interval.high))
    mine = stats.bootstrap_ratio_ci(a, b, confidence)
    if stats.median(a):
        assert mine is not None or not all(map(math.isfinite, ends))
        if mine is not None:
            assert close(mine[0], ends[0]) and close(mine[1], ends[1])
    else:
        assert mine is None


def test_compare_statistics_never_import_scipy():
    code = ("import sys\nfrom dsv4ctl.analysis import stats\n"
            "a, b = [10.1, 9.8, 10.4, 10.0, 9.9, 10.3, 10.2], [10.6, 10.2, 10.9, 10.8, 10.5, 11.0, 10.7]\n"
            "stats.mann_whitney_p(a, b); stats.mann_whitney_p(a * 3, b * 3); stats.wilcoxon_p([x - y for x, y in "
            "zip(a, b)]); stats.summarise(a * 50); stats.runs_needed(a, b, 0.5, 0.05)\n"
            "assert 'scipy' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
            "stats.bootstrap_ratio_ci(a, b)\nassert 'scipy' not in sys.modules\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
