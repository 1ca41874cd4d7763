"""Statistics for A/B comparisons, after benchstat and asv (shared notes, statistics.md). Pure functions; scipy is
imported inside them, so importing this module stays cheap.

- centre: the median; spread: the exact order-statistic 95% CI of the median (fewer than 6 samples: unbounded);
- test: two-sided Mann-Whitney U (exact distribution for small samples, scipy chooses); a test error such as all
  values equal gives p = 1;
- paired runs (interleaved A/B): Wilcoxon signed-rank on the pair differences;
- sample planning: the smallest n whose best possible exact p reaches alpha (benchstat: 4 at 0.05), the smallest
  n with a bounded interval of the median (6 at 95%), and a normal-approximation estimate of the n needed to see
  an effect of a given size with 80% power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    n: int
    median: float | None
    ci: tuple[float, float] | None  # None without samples; (-inf, inf) when n is too small
    mad: float | None


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def median_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics: [x_(k), x_(n+1-k)] with the largest k such that
    2 * P(Binomial(n, 1/2) <= k - 1) <= 1 - confidence. Unbounded when no k qualifies (n < 6 at 95%)."""
    import numpy as np
    from scipy.stats import binom

    n = len(values)
    alpha = 1 - confidence
    ks = np.arange(1, n // 2 + 1)
    ok = ks[2 * binom.cdf(ks - 1, n, 0.5) <= alpha] if n else ks
    if not len(ok):
        return (-math.inf, math.inf)
    k = int(ok.max())
    ordered = sorted(values)
    return (ordered[k - 1], ordered[n - k])


def summarise(values: list[float], confidence: float = 0.95) -> Summary:
    if not values:
        return Summary(0, None, None, None)
    centre = median(values)
    return Summary(len(values), centre, median_ci(values, confidence), median([abs(v - centre) for v in values]))


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when the test cannot be computed (e.g. every value equal)."""
    from scipy.stats import mannwhitneyu

    if not a or not b:
        return 1.0
    try:
        p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    except ValueError:
        return 1.0
    return 1.0 if math.isnan(p) else p


def wilcoxon_p(differences: list[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p-value on paired differences; None with fewer than one nonzero pair."""
    from scipy.stats import wilcoxon

    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return 1.0 if differences else None
    try:
        return float(wilcoxon(differences, alternative="two-sided", zero_method="wilcox").pvalue)
    except ValueError:
        return None


def min_samples(alpha: float) -> int:
    """The smallest n per side for which an exact two-sided Mann-Whitney test can reach p <= alpha at all: with
    complete separation p = 2 / C(2n, n) (n = 4 gives 0.0286 at alpha 0.05)."""
    n = 1
    while 2 / math.comb(2 * n, n) > alpha:
        n += 1
    return n


def ci_min_samples(confidence: float = 0.95) -> int:
    """The smallest n whose order-statistic interval of the median is bounded: the widest one, [x_(1), x_(n)],
    misses the median with probability 2 / 2^n, which must be at most 1 - confidence (6 at 95%)."""
    n = 1
    while 2 * 0.5 ** n > 1 - confidence:
        n += 1
    return n


def runs_needed(a: list[float], b: list[float], effect: float, alpha: float, power: float = 0.8) -> int:
    """Runs per side to detect an absolute shift `effect` with the observed spread (pooled 1.4826 x MAD), by the
    normal approximation scaled by Mann-Whitney's efficiency (3/pi); never below min_samples(alpha)."""
    from scipy.stats import norm

    floor = min_samples(alpha)
    spreads = [1.4826 * summarise(s).mad for s in (a, b) if len(s) > 1]
    sigma = math.sqrt(sum(s * s for s in spreads) / len(spreads)) if spreads else 0.0
    if effect <= 0 or sigma == 0:
        return floor
    z = norm.ppf(1 - alpha / 2) + norm.ppf(power)
    n = 2 * (z * sigma / effect) ** 2 * math.pi / 3
    return max(floor, math.ceil(n))


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0  # the same runs give the same interval, run after run
# The bootstrap is for a few repeats (a serve run's p95 is one value per run), where rank intervals are wide or
# unbounded. Past this many runs a side the rank-based interval of the ratio is already tight, and 2000 resamples
# of 10,000 values cost a second of `compare`: the interval is left out (detail, not the decision).
BOOTSTRAP_MAX_RUNS = 1000


def bootstrap_ratio_ci(a: list[float], b: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of median(b) / median(a), resampling each side's runs (a serve run's p95 is
    one value per run: across repeats the interval says how far the ratio of percentiles can be trusted). None with
    fewer than 2 runs on a side, more than BOOTSTRAP_MAX_RUNS, or a baseline median of 0."""
    if not 2 <= min(len(a), len(b)) or max(len(a), len(b)) > BOOTSTRAP_MAX_RUNS or median(a) == 0:
        return None
    import numpy as np
    from scipy.stats import bootstrap

    def ratio(x, y, axis=-1):
        below = np.median(x, axis=axis)
        return np.median(y, axis=axis) / np.where(below == 0, np.nan, below)

    with np.errstate(invalid="ignore", divide="ignore"):
        result = bootstrap((np.asarray(a, float), np.asarray(b, float)), ratio, vectorized=True, paired=False,
                           confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                           rng=np.random.default_rng(BOOTSTRAP_SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


def finite_or_null(value, intervals_whole: bool = False):
    """`value` (nested dicts, lists, tuples) with every NaN or infinity as None, so JSON never holds Infinity; with
    `intervals_whole`, a tuple (an interval) with a non-finite end becomes None as a whole."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v, intervals_whole) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [finite_or_null(v, intervals_whole) for v in value]
        return None if intervals_whole and isinstance(value, tuple) and any(v is None for v in items) else items
    return value
