"""The rank statistics compare and history use, in the standard library: the numbers scipy.stats gives (1.17,
the default method='auto'), without importing it (its import is about a second of a 2-core machine's `compare`).

- `mann_whitney_p`: two-sided Mann-Whitney U; the exact null distribution (counted as the coefficients of a
  Gaussian binomial) when a side has at most 8 values and nothing is tied, else the normal approximation with
  scipy's tie correction and continuity correction;
- `wilcoxon_p`: two-sided Wilcoxon signed-rank, zeros dropped ("wilcox"): exact with no ties or zeros up to 50
  pairs, the exhaustive sign-flip permutation test scipy runs with ties or zeros up to 13 pairs, else normal
  (without continuity correction, scipy's default);
- `binomial_cdf`: P(Binomial(n, 1/2) <= k), exact integers up to EXACT_BINOMIAL_N trials, lgamma past it;
- `normal_sf`: the upper tail of the standard normal as scipy's ndtr computes it (erf near 0, erfc beyond).

tests/test_stats_stdlib.py checks each one against scipy on random samples with and without ties.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

EXACT_MWU_MAX = 8  # scipy: exact when a side has at most 8 values and nothing is tied
EXACT_WILCOXON_MAX = 50  # scipy: past 50 pairs always the normal approximation
PERMUTATION_WILCOXON_MAX = 13  # scipy: with ties or zeros, every sign flip up to 2^13 (below its 9999 resamples)
EXACT_BINOMIAL_N = 5000  # past this, the binomial tail by lgamma (within 1e-9 of scipy up to 1M trials)


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z: scipy's ndtr(-z), erf inside |x| < 1/sqrt(2), erfc outside."""
    x = -z * math.sqrt(0.5)
    if abs(x) < math.sqrt(0.5):
        return 0.5 + 0.5 * math.erf(x)
    tail = 0.5 * math.erfc(abs(x))
    return 1.0 - tail if x > 0 else tail


def average_ranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Ranks 1..n with ties given their mean rank, and the size of each group of equal values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    groups = []
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and values[order[end]] == values[order[start]]:
            end += 1
        for i in order[start:end]:
            ranks[i] = start + 1 + (end - start - 1) / 2
        groups.append(end - start)
        start = end
    return ranks, groups


# ---- Mann-Whitney U -------------------------------------------------------------------------------------------


def mwu_counts(m: int, n: int, top: int) -> list[int]:
    """How many of the C(m + n, m) orderings give U = 0..top: the coefficients of the Gaussian binomial
    prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), as a power series cut at q^top."""
    poly = [1] + [0] * top
    for i in range(1, m + 1):
        step = n + i
        for d in range(top, step - 1, -1):
            poly[d] -= poly[d - step]
        for d in range(i, top + 1):
            poly[d] += poly[d - i]
    return poly


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of Mann-Whitney U for samples a and b (non-empty, no NaN), as scipy.stats.mannwhitneyu."""
    n1, n2 = len(a), len(b)
    ranks, groups = average_ranks([*a, *b])
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    if (n1 <= EXACT_MWU_MAX or n2 <= EXACT_MWU_MAX) and max(groups) == 1:
        low = int(n1 * n2 - u)  # P(U >= u) = P(U <= n1 n2 - u) by symmetry
        total = float(math.comb(n1 + n2, n1))
        tail = 0.0
        for count in mwu_counts(min(n1, n2), max(n1, n2), low):
            tail += count / total  # summed in scipy's order (its cumsum of the pmf)
        return min(max(2 * tail, 0.0), 1.0)
    n = n1 + n2
    ties = float(sum(t ** 3 - t for t in groups))
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if not variance > 0:  # every value equal: scipy's z is -inf (or NaN), its p 1
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return min(max(2 * normal_sf(z), 0.0), 1.0)


# ---- Wilcoxon signed-rank -------------------------------------------------------------------------------------


def subset_sum_counts(weights: list[int]) -> list[int]:
    """counts[s] = how many subsets of `weights` (positive integers) sum to s."""
    counts = [1] + [0] * sum(weights)
    reach = 0
    for w in weights:
        reach += w
        for s in range(reach, w - 1, -1):
            counts[s] += counts[s - w]
    return counts


def wilcoxon_p(differences: list[float]) -> float:
    """Two-sided Wilcoxon signed-rank p on paired differences (zeros dropped; at least one nonzero), as
    scipy.stats.wilcoxon(differences, zero_method="wilcox")."""
    if any(math.isnan(d) for d in differences):
        return math.nan  # scipy's nan_policy 'propagate'
    nonzero = [d for d in differences if d != 0]
    zeros = len(differences) - len(nonzero)
    ranks, groups = average_ranks([abs(d) for d in nonzero])
    r_plus = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    tied = max(groups) > 1
    if len(differences) <= EXACT_WILCOXON_MAX and not tied and not zeros:
        counts = subset_sum_counts(list(range(1, len(nonzero) + 1)))
        return _two_tails(counts, int(r_plus), 1, len(nonzero))
    if len(differences) <= PERMUTATION_WILCOXON_MAX:
        # every sign flip of the differences (a zero stays out either way, so it counts twice)
        counts = subset_sum_counts([round(2 * r) for r in ranks])
        return _two_tails(counts, round(2 * r_plus), 2 ** zeros, len(differences))
    count = float(len(nonzero))
    mean = count * (count + 1.) * 0.25
    spread = count * (count + 1.) * (2. * count + 1.)
    ties = float(sum(t ** 3 - t for t in groups))
    se = math.sqrt((spread - ties / 2) / 24)
    return 2 * normal_sf(abs((r_plus - mean) / se))  # scipy's default: no continuity correction


def _two_tails(counts: list[int], observed: int, weight: int, flips: int) -> float:
    """2 x the smaller tail at `observed` (both tails include it) of a null distribution given by counts (each
    counted `weight` times) over 2^flips equally likely outcomes, capped at 1: exact, as scipy's dyadic floats."""
    low = sum(counts[:observed + 1]) * weight
    high = sum(counts[observed:]) * weight
    return min(1.0, float(Fraction(2 * min(low, high), 2 ** flips)))


# ---- the binomial tail and the normal quantile ----------------------------------------------------------------


def binomial_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n <= EXACT_BINOMIAL_N:
        total, term = 0, 1
        for i in range(k + 1):
            total += term
            term = term * (n - i) // (i + 1)
        return float(Fraction(total, 2 ** n))
    log_all = math.lgamma(n + 1) - n * math.log(2)

    def log_term(i: int) -> float:
        return log_all - math.lgamma(i + 1) - math.lgamma(n - i + 1)

    first = _first_term_above(log_term, k, log_term(k) - 60)  # the terms before it add < e^-60 of the tail
    return min(1.0, math.fsum(math.exp(log_term(i)) for i in range(first, k + 1)))


def _first_term_above(log_term, k: int, floor: float) -> int:
    """The smallest i <= k whose log term is at least `floor` (the terms grow with i up to n / 2)."""
    low, high = 0, k
    while low < high:
        mid = (low + high) // 2
        if log_term(mid) >= floor:
            high = mid
        else:
            low = mid + 1
    return low


@functools.lru_cache(maxsize=256)
def median_rank(n: int, alpha: float) -> int:
    """The largest k with 2 P(Binomial(n, 1/2) <= k - 1) <= alpha (0 when none): [x_(k), x_(n+1-k)] covers the
    median with confidence 1 - alpha."""
    if n <= EXACT_BINOMIAL_N:
        num, den = float(alpha).as_integer_ratio()
        limit = num << n  # 2 den sum_{i<k} C(n, i) <= num 2^n: alpha exactly, in integers
        best, total, term = 0, 0, 1
        for k in range(1, n // 2 + 1):
            total += term  # sum_{i <= k-1} C(n, i)
            term = term * (n - k + 1) // k
            if 2 * den * total > limit:
                break
            best = k
        return best
    low, high = 0, n // 2  # the tail grows with k: bisect for the last k that passes
    while low < high:
        mid = (low + high + 1) // 2
        if 2 * binomial_cdf(mid - 1, n) <= alpha:
            low = mid
        else:
            high = mid - 1
    return low
