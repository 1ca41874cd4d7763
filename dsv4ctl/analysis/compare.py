"""`compare`: is the candidate faster, and is it still correct? Data in, a `Comparison` out (the CLI draws it).

Decision per metric, in order:
  blocked       some run of either side did not pass its verdict (listed with status and first blocker), or a
                side has no sample of the metric
  promote       the Mann-Whitney p < alpha, the candidate's median is better by at least `factor` (asv's rule:
                better means new < old / factor for lower-is-better metrics) and both medians have a bounded 95%
                interval (benchstat: at least 6 samples); without one the result is inconclusive and says so
  reject        p < alpha and the candidate is worse
  inconclusive  anything else, with the runs per side needed to see a `factor`-sized effect
The comparison's decision is the worst of its metrics' (blocked, reject, inconclusive, promote).
Exit codes (`errors.ExitCode`): 0 promote, 1 reject or blocked, 5 inconclusive (3 is a wait's timeout).

Which runs are on each side is `sides.py`'s business (an A/B campaign's own sides, never runs outside it); a run
the user cancelled is left out and said so. A side may mix experiments (`tag:nightly`): its samples are pooled, and
each experiment's share is listed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from . import stats
from .differences import differences, timing_warning, token_comparison
from ..errors import ExitCode, UsageError
from ..store import Store
from .sides import (PROVENANCE_COLUMNS, CompareError, CompareRow, NoSuchSide, Side,  # noqa: F401 - re-exported
                    load_rows)

DECISION_EXIT = {"promote": int(ExitCode.OK), "reject": int(ExitCode.FAILED), "blocked": int(ExitCode.FAILED),
                 "inconclusive": int(ExitCode.INCONCLUSIVE)}
SEVERITY = ("blocked", "reject", "inconclusive", "promote")  # the first one any metric reached decides
CONFIDENCE = 0.95
DIRECTIONS = ("lower", "higher")
HIGHER_COUNTS = ("request_goodput", "completed")  # serve runs (issue 14): requests that met the SLOs, or came back
LOWER_COUNTS = ("failed",)


class UnknownMetric(UsageError):
    """No run of either side has the metric asked for."""


def check_settings(alpha: float, factor: float, better: str | None) -> None:
    """Refuse settings no decision can be made with: alpha outside (0, 1), factor not above 0, an unknown way."""
    if not 0 < alpha < 1:
        raise UsageError(f"alpha {alpha} is not a significance level: give a number between 0 and 1")
    if not (math.isfinite(factor) and factor > 0):
        raise UsageError(f"factor {factor} is not a positive number")
    if better is not None and better not in DIRECTIONS:
        raise UsageError(f"direction {better!r} is not one of: {', '.join(DIRECTIONS)}")


def direction(metric: str) -> str:
    """'lower' or 'higher' is better, from the metric's name."""
    if metric.endswith("_per_s") or "throughput" in metric or metric in HIGHER_COUNTS:
        return "higher"
    if metric in LOWER_COUNTS:
        return "lower"
    if metric.endswith(("_s", "_ms", "_seconds")) or "latency" in metric:
        return "lower"
    raise UsageError(f"cannot tell whether more or less {metric!r} is better: pass --direction lower|higher")


def parse_metrics(text: str) -> list[str]:
    """`gen_s,ttft_s` -> ['gen_s', 'ttft_s'], in order, each once."""
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names:
        raise UsageError("no metric given: name one or more, separated by commas (gen_s,ttft_s)")
    return names


# ---- the comparison -------------------------------------------------------------------------------------------------


@dataclass
class SideRuns:
    """Who is on a side: its runs, the experiments it mixes, and the runs that did not pass."""

    name: str
    runs: list[int]
    experiments: list[dict[str, Any]]  # [{experiment, runs, passed}]
    failed_runs: list[dict[str, Any]]


@dataclass
class SideStats:
    """One metric on one side: passed samples pooled over the side's experiments, and each experiment's share."""

    n: int
    median: float | None
    ci: tuple[float, float] | None  # None without samples or when unbounded (`ci_bounded` says which)
    ci_bounded: bool
    by_experiment: list[dict[str, Any]]  # [{experiment, n, median}]
    values: list[float] = field(repr=False, default_factory=list)


@dataclass
class MetricComparison:
    metric: str
    direction: str
    baseline: SideStats
    candidate: SideStats
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    p_value: float | None
    significant: bool
    decision: str
    reasons: list[str]
    runs_needed: int | None
    paired: dict[str, Any] | None
    bootstrap_ci: tuple[float, float] | None = None  # candidate/baseline medians, percentile bootstrap (issue 14)


@dataclass
class Comparison:
    alpha: float
    factor: float
    baseline: SideRuns
    candidate: SideRuns
    decision: str
    metrics: list[MetricComparison]
    reasons: list[str]
    differences: list[dict[str, Any]]
    token_differences: list[dict[str, Any]]
    warnings: list[str]
    min_runs: int  # per side, for the test to be able to reach alpha at all
    min_runs_bounded_ci: int  # per side, for a bounded 95% interval of the median

    @property
    def exit_code(self) -> int:
        return DECISION_EXIT[self.decision]

    @property
    def mixed(self) -> bool:
        return len(self.baseline.experiments) > 1 or len(self.candidate.experiments) > 1

    def metric(self, name: str) -> MetricComparison:
        return next(m for m in self.metrics if m.metric == name)

    def to_json(self) -> dict[str, Any]:
        """Plain nested data: arrays, objects and nulls (an unbounded interval is null, never Infinity)."""
        data = asdict(self)
        for m in data["metrics"]:
            for side in ("baseline", "candidate"):
                m[side].pop("values")
        data["exit_code"] = self.exit_code
        return _finite_or_null(data)


def _finite_or_null(value: Any) -> Any:
    from .stats import finite_or_null

    return finite_or_null(value, intervals_whole=True)


def _side_runs(side: Side) -> SideRuns:
    failed = [{"run": r.id, "job_id": r.job_id, "state": r.state, "experiment": r.experiment,
               "status": r.status or "not judged", "false_green": r.false_green,
               "first_blocker": r.first_blocker_kind} for r in side.runs if not r.passed]
    groups = [{"experiment": name, "runs": sum(1 for r in side.runs if r.experiment == name),
               "passed": sum(1 for r in side.runs if r.experiment == name and r.passed)}
              for name in side.experiments]
    return SideRuns(side.name, [r.id for r in side.runs], groups, failed)


def _side_stats(side: Side, metric: str) -> SideStats:
    passed = [r for r in side.runs if r.passed and metric in r.metrics]
    values = [r.metrics[metric] for r in passed]
    summary = stats.summarise(values, CONFIDENCE)
    bounded = summary.ci is not None and all(map(math.isfinite, summary.ci))
    groups = []
    for name in side.experiments:
        mine = [r.metrics[metric] for r in passed if r.experiment == name]
        groups.append({"experiment": name, "n": len(mine), "median": stats.median(mine) if mine else None})
    return SideStats(summary.n, summary.median, summary.ci if bounded else None, bounded, groups, values)


def _paired(base: Side, cand: Side, metric: str) -> dict[str, Any] | None:
    left = {r.pair_id: r for r in base.runs if r.pair_id is not None}
    right = {r.pair_id: r for r in cand.runs if r.pair_id is not None}
    diffs = []
    for pair in sorted(set(left) & set(right)):
        a, b = left[pair].metrics.get(metric), right[pair].metrics.get(metric)
        if a is not None and b is not None and left[pair].passed and right[pair].passed:
            diffs.append(b - a)
    if not diffs:
        return None
    return {"pairs": len(diffs), "median_difference": stats.median(diffs), "wilcoxon_p": stats.wilcoxon_p(diffs)}


def known_metrics(sides: list[Side]) -> list[str]:
    return sorted({name for side in sides for r in side.runs for name in r.metrics})


def check_metrics(metrics: list[str], base: Side, cand: Side) -> None:
    """A metric no run of either side has is a typo, not a result: refuse it and list what is there."""
    present = known_metrics([base, cand])
    unknown = [m for m in metrics if m not in present]
    if unknown and present:
        close = [p for m in unknown for p in present if p.lower() == m.lower()]
        raise UnknownMetric(f"no run of either side has the metric {', '.join(map(repr, unknown))}; metrics "
                            f"present: {', '.join(present)}" + (f" (did you mean {close[0]}?)" if close else ""))


def compare(store: Store, baseline: str | None, candidate: str | None, metric: str | list[str] = "gen_s",
            alpha: float = 0.05, factor: float = 1.05, expect_diff: list[str] | None = None,
            better: str | None = None, campaign: str | None = None) -> Comparison:
    """Compare two sides named as on the command line, or an A/B campaign's own two (see `sides.choose_sides`)."""
    from .sides import choose_sides

    check_settings(alpha, factor, better)
    chosen = choose_sides(store, baseline, candidate, campaign)
    result = compare_sides(store, chosen.baseline, chosen.candidate, metric, alpha, factor, expect_diff, better)
    result.warnings[:0] = chosen.notes
    return result


def compare_sides(store: Store, base: Side, cand: Side, metric: str | list[str] = "gen_s", alpha: float = 0.05,
                  factor: float = 1.05, expect_diff: list[str] | None = None,
                  better: str | None = None) -> Comparison:
    from .sides import set_aside_cancelled

    check_settings(alpha, factor, better)
    metrics = [metric] if isinstance(metric, str) else list(metric)
    base, left_out = set_aside_cancelled(base, "baseline")
    cand, also_left_out = set_aside_cancelled(cand, "candidate")
    check_metrics(metrics, base, cand)
    ways = {m: better or direction(m) for m in metrics}
    base_runs, cand_runs = _side_runs(base), _side_runs(cand)
    reasons = [_failed_reason(label, f) for label, side in (("baseline", base_runs), ("candidate", cand_runs))
               for f in side.failed_runs]
    diffs = differences(store, base, cand)
    warnings = left_out + also_left_out + _factor_warnings(diffs, expect_diff)
    timing = timing_warning(store, base, cand)
    warnings += [timing] if timing else []
    for label, side in (("baseline", base_runs), ("candidate", cand_runs)):
        if len(side.experiments) > 1:
            warnings.append(f"the {label} mixes {len(side.experiments)} experiments "
                            f"({', '.join(g['experiment'] for g in side.experiments)}): their samples are pooled; "
                            "each one's median is listed")
    warnings += one_log_warnings(store, base, cand)
    settings = Settings(alpha, factor, stats.min_samples(alpha), stats.ci_min_samples(CONFIDENCE))
    results = [_compare_metric(base, cand, m, ways[m], settings, blocked=bool(reasons)) for m in metrics]
    decision = min((r.decision for r in results), key=SEVERITY.index)
    if any(m.baseline.n < settings.min_runs or m.candidate.n < settings.min_runs for m in results
           if m.decision not in ("blocked", "reject")):
        warnings.append(f"need >= {settings.min_runs} samples per side to detect a difference at alpha {alpha}")
    tokens, length_notes = token_comparison(store, base, cand)
    return Comparison(alpha=alpha, factor=factor, baseline=base_runs, candidate=cand_runs, decision=decision,
                      metrics=results, reasons=reasons, differences=diffs,
                      token_differences=tokens, warnings=warnings + length_notes,
                      min_runs=settings.min_runs, min_runs_bounded_ci=settings.min_runs_bounded_ci)


def _failed_reason(label: str, failed: dict[str, Any]) -> str:
    """Why a run blocks the comparison: its verdict, or that it has none yet (still in flight)."""
    from ..judge.states import is_waiting

    if failed["status"] == "not judged" and failed["state"] and is_waiting(failed["state"]):
        return (f"{label} run {failed['run']} ({failed['experiment']}) is still {failed['state']}: not judged yet "
                "(`dsv4ctl status --watch`, then compare again)")
    return (f"{label} run {failed['run']} ({failed['experiment']}) did not pass: {failed['status']}"
            + (" FALSE GREEN" if failed["false_green"] else "")
            + (f" ({failed['first_blocker']})" if failed["first_blocker"] else ""))


@dataclass(frozen=True)
class Settings:
    alpha: float
    factor: float
    min_runs: int
    min_runs_bounded_ci: int


def _compare_metric(base_side: Side, cand_side: Side, metric: str, way: str, s: Settings,
                    blocked: bool) -> MetricComparison:
    base, cand = _side_stats(base_side, metric), _side_stats(cand_side, metric)
    p = stats.mann_whitney_p(base.values, cand.values) if base.values and cand.values else None
    significant = p is not None and p < s.alpha
    ratio = cand.median / base.median if base.median and cand.median is not None else None
    reasons: list[str] = []
    needed = None
    if blocked:
        decision = "blocked"
        reasons.append("a run did not pass its verdict: the speed of a broken run is not compared")
    elif not base.values or not cand.values:
        decision = "blocked"
        reasons.append(f"no {metric} samples on the {'baseline' if not base.values else 'candidate'} side")
    else:
        better_by = (1 / ratio if way == "lower" else ratio) if ratio else 1.0  # > 1: the candidate is better
        short = [x.n for x in (base, cand) if not x.ci_bounded]
        if significant and better_by < 1:
            decision = "reject"
            reasons.append(f"candidate worse by {1 / better_by:.3f}x, p = {p:.3g}")
        elif significant and better_by >= s.factor and not short:
            decision = "promote"
            reasons.append(f"candidate better by {better_by:.3f}x (>= {s.factor}), p = {p:.3g}")
        else:
            decision = "inconclusive"
            if significant and better_by >= s.factor:
                reasons.append(f"better by {better_by:.3f}x with p = {p:.3g}, but need >= {s.min_runs_bounded_ci} "
                               f"samples per side for a bounded {CONFIDENCE:.0%} interval of the median "
                               f"(have {base.n} and {cand.n}): not promoted")
            elif significant:
                reasons.append(f"significant (p = {p:.3g}) but better by only {better_by:.3f}x (< {s.factor})")
            else:
                reasons.append(f"no significant difference (p = {p:.3g} >= {s.alpha}); benchstat would print ~")
            effect = abs(base.median * (s.factor - 1))
            needed = max(stats.runs_needed(base.values, cand.values, effect, s.alpha), s.min_runs_bounded_ci)
            reasons.append(f"about {needed} runs per side would see a {s.factor}x change with 80% power"
                           + _observed_needs(base, cand, better_by, s))
    return MetricComparison(metric=metric, direction=way, baseline=base, candidate=cand, ratio=ratio,
                            ratio_ci=_ratio_ci(base.ci, cand.ci), p_value=p, significant=significant,
                            decision=decision, reasons=reasons, runs_needed=needed,
                            paired=_paired(base_side, cand_side, metric),
                            bootstrap_ci=stats.bootstrap_ratio_ci(base.values, cand.values, CONFIDENCE))


def _observed_needs(base: SideStats, cand: SideStats, better_by: float, s: Settings) -> str:
    """`; the observed 1.56x would need about 9` when the difference seen is larger than `factor`: the runs-needed
    figure for a factor-sized change alone reads as if the observed one were out of reach (issue 26 m10)."""
    seen = max(better_by, 1 / better_by) if better_by > 0 else 1.0
    if seen <= s.factor:
        return ""
    observed = stats.runs_needed(base.values, cand.values, abs(cand.median - base.median), s.alpha)
    return f"; the observed {seen:.2f}x would need about {max(observed, s.min_runs_bounded_ci)}"


def _ratio_ci(base: tuple[float, float] | None, cand: tuple[float, float] | None) -> tuple[float, float] | None:
    """A conservative interval for candidate/baseline from the two medians' 95% intervals; None when either is
    unbounded or the baseline's reaches 0."""
    if not base or not cand or base[0] <= 0:
        return None
    return (cand[0] / base[1], cand[1] / base[0])


def one_log_warnings(store: Store, base: Side, cand: Side) -> list[str]:
    """Runs that are one log ingested more than once (`ingest --again`, the same content hash): their samples are
    copies, not repeats, so the test's p-value and interval overstate what was measured (issue 29 S11)."""
    ids = [r.id for side in (base, cand) for r in side.runs]
    by_hash: dict[str, list[int]] = {}
    for start in range(0, len(ids), 900):
        chunk = ids[start:start + 900]
        for run_id, sha in store.db.execute(f"SELECT id, content_sha256 FROM runs WHERE id IN "
                                            f"({','.join('?' * len(chunk))}) AND content_sha256 IS NOT NULL", chunk):
            by_hash.setdefault(sha, []).append(run_id)
    out = []
    for label, side in (("baseline", base), ("candidate", cand)):
        mine = {r.id for r in side.runs}
        copies = [sorted(set(runs) & mine) for runs in by_hash.values() if len(set(runs) & mine) > 1]
        if copies:
            distinct = len(mine) - sum(len(c) - 1 for c in copies)
            shown = "; ".join(", ".join(map(str, c[:6])) + (" ..." if len(c) > 6 else "") for c in copies[:4])
            out.append(f"the {label}'s {len(mine)} runs are {distinct} distinct log(s): runs {shown} are one log "
                       "ingested again (--again); their samples are copies, not repeats, and the statistics "
                       "overstate what was measured")
    shared = [runs for runs in by_hash.values()
              if set(runs) & {r.id for r in base.runs} and set(runs) & {r.id for r in cand.runs}]
    if shared:
        out.append(f"runs {', '.join(map(str, sorted(shared[0])[:6]))} are one log on both sides: the sides share "
                   "samples")
    return out


def _factor_warnings(diffs: list[dict[str, Any]], expect: list[str] | None) -> list[str]:
    meaningful = [d["key"] for d in diffs if not d["key"].startswith("provenance.")]
    if expect is None:
        return [f"the sides differ in more than one setting: {', '.join(meaningful)}"] if len(meaningful) > 1 else []
    unexpected = [k for k in meaningful if not any(k == e or k.startswith(e + ".") for e in expect)]
    warnings = []
    if unexpected:
        warnings.append(f"besides {', '.join(expect)}, the sides also differ in: {', '.join(unexpected)}")
    missing = [e for e in expect if not any(k == e or k.startswith(e + ".") for k in meaningful)]
    if missing:
        warnings.append(f"the intended factor does not differ between the sides: {', '.join(missing)}")
    return warnings
