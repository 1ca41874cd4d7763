"""Statistics for A/B comparisons, after benchstat and asv (shared notes, statistics.md). Pure functions in the
standard library (rank_tests.py: the numbers scipy.stats gives, without its one-second import); numpy is imported
inside the bootstrap only.

- centre: the median; spread: the exact order-statistic 95% CI of the median (fewer than 6 samples: unbounded);
- test: two-sided Mann-Whitney U (exact distribution for small samples, as scipy chooses); a test that cannot be
  computed, such as all values equal, gives p = 1;
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
    from .rank_tests import median_rank

    n = len(values)
    k = median_rank(n, 1 - confidence)
    if not k:
        return (-math.inf, math.inf)
    ordered = sorted(values)
    return (ordered[k - 1], ordered[n - k])


def summarise(values: list[float], confidence: float = 0.95) -> Summary:
    if not values:
        return Summary(0, None, None, None)
    centre = median(values)
    return Summary(len(values), centre, median_ci(values, confidence), median([abs(v - centre) for v in values]))


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when the test cannot be computed (e.g. every value equal)."""
    from .rank_tests import mann_whitney_p as p_value

    if not a or not b or any(math.isnan(v) for v in (*a, *b)):
        return 1.0
    return p_value([float(v) for v in a], [float(v) for v in b])


def wilcoxon_p(differences: list[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p-value on paired differences; None with fewer than one nonzero pair."""
    from .rank_tests import wilcoxon_p as p_value

    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return 1.0 if differences else None
    return p_value([float(d) for d in differences])


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
    from statistics import NormalDist

    floor = min_samples(alpha)
    spreads = [1.4826 * summarise(s).mad for s in (a, b) if len(s) > 1]
    sigma = math.sqrt(sum(s * s for s in spreads) / len(spreads)) if spreads else 0.0
    if effect <= 0 or sigma == 0:
        return floor
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
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

    def ratio(x, y):
        below = np.median(x, axis=-1)
        return np.median(y, axis=-1) / np.where(below == 0, np.nan, below)

    # scipy.stats.bootstrap(..., paired=False, method="percentile") in numpy: each side resampled in turn from the
    # one generator, the statistic over every resample, then the two quantiles (tests/test_stats_stdlib.py)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    sides = [np.asarray(side, float) for side in (a, b)]
    resampled = [side[rng.integers(0, len(side), (BOOTSTRAP_RESAMPLES, len(side)))] for side in sides]
    tail = (1 - confidence) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        ends = np.quantile(ratio(*resampled), [tail, 1 - tail])
    low, high = float(ends[0]), float(ends[1])
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
