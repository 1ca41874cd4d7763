"""Performance history (issue 17): every passed run's metric over commits or dates, medians per commit with their
order-statistic intervals, and the steps (change points) in that series.

Step detection is PELT, "Pruned Exact Linear Time" (R. Killick, P. Fearnhead, I. A. Eckley, "Optimal detection of
changepoints with a linear computational cost", JASA 107(500):1590-1598, 2012), for changes in the mean of Gaussian
noise, with a penalty of 4 log N per change: stricter than the 3 log N leading term of the modified BIC of Zhang and
Siegmund (Biometrics 63:22-32, 2007), which Killick et al. list among PELT's penalties; 3 log N let 4-6% of
single-run noise series show a step, 4 log N keeps them under 2% and finds a 7% step as often. Two choices of ours:
- change points may only fall between groups (commits or dates): one commit's runs are never split;
- the noise scale is estimated robustly from differences of consecutive runs of the same commit (1.4826 x MAD /
  sqrt 2), or of all consecutive runs when too few commits were repeated, so a step barely moves it.
Each step's confidence is the two-sided Mann-Whitney p between the runs of the segments either side (stats.py);
a change point whose p exceeds STEP_ALPHA is dropped and its segments merged, as asv also asks a step to be
statistically significant before it reports it.
Runs that failed the correctness gate never enter the series: a fast run with bad tokens is no improvement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

SPARKS = "▁▂▃▄▅▆▇█"
PENALTY_PER_LOG_N = 4.0  # per change point, x log N (see the module docstring)
STEP_ALPHA = 0.01  # a change point is kept only if its two segments' runs differ at this level (Mann-Whitney)
# Measured over 1,000 seeded pure-noise series (tests/test_history.py checks 200 of them against the bound):
# 20 commits x 3 runs 0.5%, 8 x 2 1.6%, 30 x 1 1.9%, 10 x 1 0.7% (2% noise; the scale does not matter).
# Stated bound: at most 5% of pure-noise series show a step.
FALSE_POSITIVE_BOUND = 0.05


@dataclass(frozen=True)
class Sample:
    run_id: int
    label: str | None
    group: str  # the commit (git sha, else vLLM version, else "unknown") or the date
    value: float
    git_sha: str | None = None
    vllm_version: str | None = None
    spec_hash: str | None = None
    when: str | None = None


@dataclass(frozen=True)
class Point:
    """One group of the history (a commit or a date): its runs' median and the 95% interval of that median."""

    group: str
    n: int
    median: float
    ci: tuple[float, float]
    run_ids: list[int]
    spec_hashes: list[str]
    vllm_versions: list[str]


@dataclass(frozen=True)
class Step:
    """A change point between two groups: the median after over the median before, and its p-value."""

    before: str  # the last group of the earlier segment
    after: str  # the first group of the later segment
    index: int  # index of `after` in the points
    median_before: float
    median_after: float
    ratio: float
    p_value: float
    config_changed: bool
    notes: list[str] = field(default_factory=list)

    @property
    def size(self) -> str:
        """"+48.9%, x1.489", or "from 0" when the median before is 0 (no finite ratio)."""
        if not math.isfinite(self.ratio):
            return "from 0" if self.median_before == 0 else "ratio beyond a float"
        return f"{(self.ratio - 1) * 100:+.1f}%, x{self.ratio:.3f}"


@dataclass(frozen=True)
class History:
    experiment: str
    metric: str
    by: str
    points: list[Point]
    steps: list[Step]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: a number that is not finite (an unbounded interval, a ratio from 0) is null, never Infinity."""
        return _finite_or_null({
            "experiment": self.experiment, "metric": self.metric, "by": self.by,
            "points": [{**_fields_of(p), "ci": list(p.ci) if all(map(math.isfinite, p.ci)) else None}
                       for p in self.points], "steps": [_fields_of(s) for s in self.steps]})


def _fields_of(value: Any) -> dict[str, Any]:
    """asdict for a Point or Step (no dataclass inside them) without its deep copy of every run id: 0.2 s of a
    report's 50-commit histories; _finite_or_null builds new lists anyway."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def _finite_or_null(value: Any) -> Any:
    from .stats import finite_or_null

    return finite_or_null(value)


# ---- change points ----------------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else _midpoint(ordered[mid - 1], ordered[mid])


def _midpoint(a: float, b: float) -> float:
    """(a + b) / 2 without overflow: the sum of two values near 1e308 is infinite, their halves' sum is not."""
    total = a + b
    return total / 2 if math.isfinite(total) else a / 2 + b / 2


def _rescaled(groups: list[list[float]]) -> list[list[float]]:
    """The values divided by a power of two near their largest magnitude (exact), so that the squares and sums of
    change-point detection stay finite whatever the metric's range (1e308 squared is infinite)."""
    largest = max((abs(v) for g in groups for v in g), default=0.0)
    if not 0 < largest < math.inf:
        return groups
    exponent = math.frexp(largest)[1]
    return [[math.ldexp(v, -exponent) for v in g] for g in groups]


def noise_scale(groups: list[list[float]]) -> float:
    """Robust standard deviation of the noise: from differences of consecutive runs within a group when there are
    at least 5 such, else from all consecutive runs (a few steps barely move a median)."""
    within = [b - a for g in groups for a, b in zip(g, g[1:])]
    flat = [v for g in groups for v in g]
    diffs = within if len(within) >= 5 else [b - a for a, b in zip(flat, flat[1:])]
    if not diffs:
        return 0.0
    return 1.4826 * _median([abs(d) for d in diffs]) / math.sqrt(2)


def change_points(groups: list[list[float]], penalty: float | None = None) -> list[int]:
    """PELT over group boundaries: the indices i (1 <= i < len(groups)) where a new segment starts, minimising
    sum of Gaussian segment costs (squared deviations / sigma^2) + penalty x number of changes."""
    m = len(groups)
    n_total = sum(len(g) for g in groups)
    if m < 2 or n_total < 3:
        return []
    groups = _rescaled(groups)  # a cut does not depend on the unit, and the sums below stay finite
    flat = [v for g in groups for v in g]
    scale = max(abs(_median(flat)), 1e-12)
    sigma = max(noise_scale(groups), 1e-6 * scale)  # all equal: any change is real, but never divide by zero
    beta = PENALTY_PER_LOG_N * math.log(n_total) if penalty is None else penalty
    # prefix sums at group boundaries, centred (values / sigma) for numerical stability
    s1, s2, cnt = [0.0], [0.0], [0]
    for g in groups:
        for v in g:
            z = (v - flat[0]) / sigma
            s1.append(s1[-1] + z)
            s2.append(s2[-1] + z * z)
        cnt.append(len(s1) - 1)

    def cost(a: int, b: int) -> float:  # groups a..b-1
        lo, hi = cnt[a], cnt[b]
        n = hi - lo
        t1, t2 = s1[hi] - s1[lo], s2[hi] - s2[lo]
        return t2 - t1 * t1 / n if n else 0.0

    best = [-beta] + [math.inf] * m
    last = [0] * (m + 1)
    candidates = [0]
    for t in range(1, m + 1):
        scores = [(best[s] + cost(s, t) + beta, s) for s in candidates]
        best[t], last[t] = min(scores)
        # PELT's pruning (K = 0 for this cost): a start that cannot beat the optimum now never will
        candidates = [s for score, s in scores if score - beta <= best[t]] + [t]
    cuts, t = [], m
    while t > 0:
        t = last[t]
        if t > 0:
            cuts.append(t)
    return sorted(cuts)


def _segments(values: list[list[float]], cuts: list[int]) -> list[tuple[list[float], list[float]]]:
    bounds = [0, *cuts, len(values)]
    return [([v for g in values[bounds[k]:cut] for v in g], [v for g in values[cut:bounds[k + 2]] for v in g])
            for k, cut in enumerate(cuts)]


def confirmed_change_points(values: list[list[float]], alpha: float = STEP_ALPHA, p_value=None) -> list[int]:
    """PELT's change points, less those the runs do not confirm: while the least significant one has a
    Mann-Whitney p above `alpha` between its neighbouring segments, it is dropped (the segments merge)."""
    if p_value is None:
        from .stats import mann_whitney_p as p_value
    cuts = change_points(values)
    while cuts:
        ps = [p_value(before, after) for before, after in _segments(values, cuts)]
        worst = max(range(len(cuts)), key=ps.__getitem__)
        if ps[worst] <= alpha:
            break
        cuts.pop(worst)
    return cuts


def find_steps(points: list[Point], values: list[list[float]], p_value=None) -> list[Step]:
    """The steps of a history: confirmed change points, each with its size and the Mann-Whitney p between the runs
    of its two neighbouring segments; `config_changed` when the spec hash differs across it."""
    if p_value is None:
        from .stats import mann_whitney_p as p_value
    cuts = confirmed_change_points(values, p_value=p_value)
    steps = []
    for cut, (before, after) in zip(cuts, _segments(values, cuts)):
        m_before, m_after = _median(before), _median(after)
        left, right = points[cut - 1], points[cut]
        config = set(left.spec_hashes) != set(right.spec_hashes)
        notes = []
        if config:
            notes.append(f"spec changed ({', '.join(left.spec_hashes)} -> {', '.join(right.spec_hashes)})")
        if left.vllm_versions != right.vllm_versions and (left.vllm_versions or right.vllm_versions):
            notes.append(f"vLLM {', '.join(left.vllm_versions) or '?'} -> {', '.join(right.vllm_versions) or '?'}")
        steps.append(Step(left.group, right.group, cut, m_before, m_after, _ratio(m_after, m_before),
                          p_value(before, after), config, notes))
    return steps


def _ratio(after: float, before: float) -> float:
    """after / before; infinite (shown as "from 0", null in JSON) when before is 0 or the quotient overflows."""
    return after / before if before else math.inf  # a float quotient that overflows is inf, never an error


# ---- the series from the store ----------------------------------------------------------------------------------


def known_words(word: str, known: list[str], what: str) -> str:
    """'; did you mean X? metrics present: a, b, ...': the closest known word first, then the known ones."""
    import difflib

    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    shown = ", ".join(known[:40]) + (f" (+{len(known) - 40} more)" if len(known) > 40 else "")
    return (f"; did you mean {near[0]!r}?" if near else "") + (f"; {what}: {shown}" if known else "")


def check_series(store: Any, experiment: str, metric: str) -> None:
    """An experiment no run belongs to, or a metric no run of it recorded, is a typo, not an empty history:
    refused (exit 2) with the known ones, as `compare` refuses an unknown metric. The known metrics are those of
    the experiment's newest METRIC_NAMES_FROM runs (only read when the metric is not found)."""
    from ..errors import UsageError
    from ..store.queries import experiment_ids, experiment_names, metric_names, metric_recorded, newest_run_ids

    ids = experiment_ids(store, experiment)
    if not ids:
        raise UsageError(f"no run of an experiment named {experiment!r}"
                         + known_words(experiment, experiment_names(store), "experiments"))
    if metric_recorded(store, ids, metric):
        return
    metrics = metric_names(store, newest_run_ids(store, ids, METRIC_NAMES_FROM))
    if metrics:
        raise UsageError(f"no run of {experiment!r} has the metric {metric!r}"
                         + known_words(metric, metrics, "metrics present"))


METRIC_NAMES_FROM = 1000
GROUPS_SHOWN = 50  # a history shows the newest 50 commits (or dates) unless asked for all of them
_PAGE = 2000


def _group(by: str, sha: str | None, vllm: str | None, when: str | None) -> str:
    return (sha or (f"vllm {vllm}" if vllm else "unknown")) if by == "commit" else (when or "?")[:10]


def _newest_first(store: Any, experiment: str, metric: str, up_to_run: int) -> Any:
    """Every passed run of `experiment` with `metric` up to run id `up_to_run`, newest first, read a page at a time
    per experiment row by idx_runs_experiment_id (rowid order: no sort of all its runs)."""
    from ..store.queries import experiment_ids

    ids = experiment_ids(store, experiment)
    hashes = {eid: store.db.execute("SELECT spec_hash FROM experiments WHERE id = ?", [eid]).fetchone()[0]
              for eid in ids}  # one per experiment row: not joined into every run's row
    cursor = up_to_run + 1
    while True:
        page: list[tuple] = []
        for eid in ids:
            page += [(*row, hashes[eid], when) for *row, when in store.db.execute(
                "SELECT r.id, r.label, m.value, r.git_sha, r.vllm_version, "
                "coalesce(r.ended_at, r.submitted_at, v.judged_at) FROM runs r "
                "JOIN verdicts v ON v.run_id = r.id JOIN metrics m ON m.run_id = r.id AND m.name = ? "
                "WHERE r.experiment_id = ? AND v.passed = 1 AND r.id < ? ORDER BY r.id DESC LIMIT ?",
                [metric, eid, cursor, _PAGE]).fetchall()]
        page = sorted(page, reverse=True)[:_PAGE]  # the newest of every experiment row's newest
        yield from page
        if len(page) < _PAGE:
            return
        cursor = page[-1][0]


def window(store: Any, experiment: str, metric: str, by: str = "commit", up_to_run: int | None = None,
           groups: int | None = GROUPS_SHOWN) -> tuple[list[Sample], bool]:
    """The passed runs of `experiment` with `metric` of its newest `groups` commits (or dates; every one when
    None), in run order (oldest first), and whether older runs were left out. Read newest first and stopped at the
    first run of an older group, so the cost is the window's, not the history's; a commit that also ran before
    that point shows only its later runs."""
    if by not in ("commit", "date"):
        raise ValueError(f"--by {by!r}: commit or date")
    out: list[Sample] = []
    seen: set[str] = set()
    older = False
    for run_id, label, value, sha, vllm, spec_hash, when in _newest_first(store, experiment, metric,
                                                                          2**63 - 2 if up_to_run is None
                                                                          else up_to_run):
        group = _group(by, sha, vllm, when)
        if group not in seen and groups is not None and len(seen) >= groups:
            older = True
            break
        seen.add(group)
        out.append(Sample(run_id, label, group, value, sha, vllm, spec_hash, when))
    return list(reversed(out)), older


def samples(store: Any, experiment: str, metric: str, by: str = "commit", up_to_run: int | None = None,
            groups: int | None = GROUPS_SHOWN) -> list[Sample]:
    """The passed runs of `experiment` with `metric` of its newest `groups` commits or dates (every one when None),
    in run order (oldest first); only runs recorded up to run id `up_to_run` when given (a campaign's report shows
    the history up to that campaign)."""
    return window(store, experiment, metric, by, up_to_run, groups)[0]


def build_history(experiment: str, metric: str, by: str, runs: list[Sample], interval=None) -> History:
    """Group samples (commits in order of their first run; dates in date order), summarise, find steps."""
    if interval is None:
        from .stats import median_ci as interval
    order: dict[str, list[Sample]] = {}
    for s in (runs if by == "commit" else sorted(runs, key=lambda s: (s.group, s.run_id))):
        order.setdefault(s.group, []).append(s)
    points, values = [], []
    for group, members in order.items():
        vals = [s.value for s in members]
        points.append(Point(group, len(vals), _median(vals), tuple(interval(vals)), [s.run_id for s in members],
                            sorted({s.spec_hash for s in members if s.spec_hash}),
                            sorted({s.vllm_version for s in members if s.vllm_version})))
        values.append(vals)
    return History(experiment, metric, by, points, find_steps(points, values) if points else [])


def campaign_histories(store: Any, campaign: str, metric: str) -> list[History]:
    """The history of `metric` for each experiment of a campaign, up to the campaign's last run (its report): the
    newest GROUPS_SHOWN commits, never every earlier run."""
    campaign_id = store.campaign(campaign)["id"]
    names = sorted({row[0] for row in store.db.execute(
        "SELECT DISTINCT e.name FROM runs r JOIN experiments e ON e.id = r.experiment_id WHERE r.campaign_id = ?",
        [campaign_id])})
    if not names:
        return []
    last = store.db.execute("SELECT max(id) FROM runs WHERE campaign_id = ?", [campaign_id]).fetchone()[0]
    found = [build_history(name, metric, "commit", samples(store, name, metric, "commit", last)) for name in names]
    return [h for h in found if h.points]


def sparkline(values: list[float]) -> str:
    """One bar per value between the lowest and the highest; any finite range (halved first: 1e308 - -1e308
    overflows), a value that is not finite drawn as a space."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return " " * len(values)
    lo, hi = min(finite) / 2, max(finite) / 2
    if hi == lo:
        return "".join(SPARKS[len(SPARKS) // 2] if math.isfinite(v) else " " for v in values)
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v / 2 - lo) / (hi - lo) * len(SPARKS)))] if math.isfinite(v)
                   else " " for v in values)
