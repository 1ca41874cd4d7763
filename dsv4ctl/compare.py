"""`compare`: is the candidate faster, and is it still correct? Data in, a `Comparison` out (the CLI draws it).

Decision, in order:
  blocked       some run of either side did not pass its verdict (listed with status and first blocker), or a
                side has no sample of the metric
  promote       the Mann-Whitney p < alpha and the candidate's median is better by at least `factor`
                (asv's rule: better means new < old / factor for lower-is-better metrics)
  reject        p < alpha and the candidate is worse
  inconclusive  anything else, with the runs per side needed to see a `factor`-sized effect
Exit codes: 0 promote, 1 reject or blocked, 3 inconclusive.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import stats
from .errors import Dsv4Error, UsageError
from .store import Store

DECISION_EXIT = {"promote": 0, "reject": 1, "blocked": 1, "inconclusive": 3}
# Provenance and bookkeeping that differ between any two runs and say nothing about the experiment.
IGNORED_KEYS = ("name", "description", "tags", "repeats", "matrix", "expect", "throughput")


class CompareError(Dsv4Error):
    """A side of the comparison matches no runs, or the metric cannot be compared."""


DIRECTIONS = ("lower", "higher")


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
    if metric.endswith("_per_s") or "throughput" in metric:
        return "higher"
    if metric.endswith(("_s", "_ms", "_seconds")) or "latency" in metric:
        return "lower"
    raise CompareError(f"cannot tell whether more or less {metric!r} is better: pass --direction lower|higher")


@dataclass(frozen=True)
class CompareRow:
    """What a comparison needs of one run, loaded in one joined query per chunk of runs."""

    id: int
    experiment_id: int
    job_id: str | None
    state: str | None
    pair_id: int | None
    switches_json: str | None
    dsv4ctl_version: str | None
    git_sha: str | None
    node: str | None
    status: str | None  # the verdict's; None when not judged
    passed: bool
    first_blocker_kind: str | None
    value: float | None  # the compared metric


@dataclass
class Side:
    name: str
    runs: list[CompareRow]


_ROW_SQL = ("SELECT runs.id, runs.experiment_id, runs.job_id, runs.state, runs.pair_id, runs.switches_json, "
            "runs.dsv4ctl_version, runs.git_sha, runs.node, verdicts.status, verdicts.passed, "
            "verdicts.first_blocker_kind, metrics.value FROM runs "
            "LEFT JOIN verdicts ON verdicts.run_id = runs.id "
            "LEFT JOIN metrics ON metrics.run_id = runs.id AND metrics.name = ? WHERE runs.id IN ({marks}) "
            "ORDER BY runs.id")


def load_rows(store: Store, run_ids: list[int], metric: str) -> list[CompareRow]:
    rows: list[CompareRow] = []
    for start in range(0, len(run_ids), 900):
        chunk = run_ids[start:start + 900]
        cursor = store.db.execute(_ROW_SQL.format(marks=",".join("?" * len(chunk))), [metric, *chunk])
        rows += [CompareRow(*row[:10], bool(row[10]), row[11], row[12]) for row in cursor]
    return rows


@dataclass
class SideResult:
    name: str
    n: int
    median: float | None
    ci: tuple[float, float] | None
    values: list[float]
    runs: list[int]
    failed_runs: list[dict[str, Any]]


@dataclass
class Comparison:
    metric: str
    direction: str
    alpha: float
    factor: float
    baseline: SideResult
    candidate: SideResult
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    p_value: float | None
    significant: bool
    decision: str
    reasons: list[str]
    differences: list[dict[str, Any]]
    token_differences: list[dict[str, Any]]
    warnings: list[str]
    paired: dict[str, Any] | None
    runs_needed: int | None
    min_runs: int

    @property
    def exit_code(self) -> int:
        return DECISION_EXIT[self.decision]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for side in ("baseline", "candidate"):
            data[side].pop("values")
        return data


# ---- sides --------------------------------------------------------------------------------------------------------


def resolve_side(store: Store, ref: str, metric: str) -> Side:
    """A side: `tag:NAME`, run or job ids (`12,13,4711_2`), a spec file, or an experiment name."""
    if ref.startswith("tag:"):
        tag = ref[4:]
        ids = [r[0] for r in store.db.execute("SELECT id, tags FROM runs") if tag in (r[1] or "").split(",")]
    elif "," in ref or ref.isdigit() or ref.startswith("runs:"):
        ids = [store.find_run(p).id for p in ref.removeprefix("runs:").split(",") if p]
    else:
        names = [ref]
        if Path(ref).is_file():
            from .specload import load_spec

            names = sorted({p.spec.name for p in load_spec(ref) if p.spec})
        marks = ",".join("?" * len(names))
        ids = [r[0] for r in store.db.execute(f"SELECT runs.id FROM runs JOIN experiments ON experiments.id = "
                                              f"runs.experiment_id WHERE experiments.name IN ({marks})", names)]
    return Side(ref, load_rows(store, ids, metric)) if ids else _none(ref)


def _none(ref: str) -> Side:
    raise CompareError(f"no stored runs match {ref!r} (an experiment name, a spec file, run ids or tag:NAME; "
                       "see `dsv4ctl runs`)")


# ---- what differs ---------------------------------------------------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): json.dumps(value, sort_keys=True, ensure_ascii=False)}


def _spec_facts(store: Store, experiment_id: int, cache: dict[int, dict[str, str]]) -> dict[str, str]:
    if experiment_id not in cache:
        spec = {k: v for k, v in json.loads(store.spec_json(experiment_id)).items()
                if k not in IGNORED_KEYS and k != "switches"}
        cache[experiment_id] = _flatten(spec)
    return cache[experiment_id]


def run_facts(store: Store, run: CompareRow, cache: dict[int, dict[str, str]] | None = None) -> dict[str, str]:
    facts = dict(_spec_facts(store, run.experiment_id, {} if cache is None else cache))
    facts.update({f"switches.{k}": json.dumps(v) for k, v in json.loads(run.switches_json or "{}").items()})
    facts.update({"provenance.dsv4ctl_version": json.dumps(run.dsv4ctl_version),
                  "provenance.git_sha": json.dumps(run.git_sha), "provenance.node": json.dumps(run.node)})
    return facts


def differences(store: Store, base: Side, cand: Side) -> list[dict[str, Any]]:
    specs: dict[int, dict[str, str]] = {}

    def collect(side: Side) -> dict[str, set[str]]:
        seen: dict[str, set[str]] = {}
        done: set[tuple] = set()
        for run in side.runs:
            key = (run.experiment_id, run.switches_json, run.dsv4ctl_version, run.git_sha, run.node)
            if key in done:  # thousands of repeats share a handful of settings
                continue
            done.add(key)
            for name, value in run_facts(store, run, specs).items():
                seen.setdefault(name, set()).add(value)
        return seen

    a, b = collect(base), collect(cand)
    out = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key, {"null"}), b.get(key, {"null"})
        if left != right:
            out.append({"key": key, "baseline": sorted(json.loads(v) for v in left if v is not None)
                        if all(v is not None for v in left) else sorted(left),
                        "candidate": sorted(json.loads(v) for v in right)})
    return out


def _greedy(store: Store, run: CompareRow) -> bool:
    return (json.loads(store.spec_json(run.experiment_id)).get("sampling") or {}).get("temperature", 0) == 0


def token_differences(store: Store, base: Side, cand: Side) -> list[dict[str, Any]]:
    """Greedy runs should agree token for token: the first differing position per request, if any."""
    def first_tokens(side: Side) -> list[list[int]] | None:
        for run in side.runs:
            if run.passed and _greedy(store, run):
                verdict = store.verdict(run.id) or {}
                return [r["token_ids"] for r in verdict.get("requests", [])]
        return None

    a, b = first_tokens(base), first_tokens(cand)
    if a is None or b is None:
        return []
    from .judge.rules import first_divergence

    out = []
    for index, (left, right) in enumerate(zip(a, b)):
        found = first_divergence(left, right)
        if found:
            out.append({"request": index, "position": found[0], "baseline": found[1], "candidate": found[2]})
    return out


# ---- the comparison -------------------------------------------------------------------------------------------------


def _side_result(store: Store, side: Side, metric: str) -> SideResult:
    failed = []
    values = []
    for run in side.runs:
        if not run.passed:
            failed.append({"run": run.id, "job_id": run.job_id, "state": run.state,
                           "status": run.status or "not judged", "first_blocker": run.first_blocker_kind})
        elif run.value is not None:
            values.append(run.value)
    summary = stats.summarise(values)
    return SideResult(side.name, summary.n, summary.median, summary.ci, values, [r.id for r in side.runs], failed)


def _paired(base: Side, cand: Side) -> dict[str, Any] | None:
    left = {r.pair_id: r for r in base.runs if r.pair_id is not None}
    right = {r.pair_id: r for r in cand.runs if r.pair_id is not None}
    diffs = []
    for pair in sorted(set(left) & set(right)):
        a, b = left[pair].value, right[pair].value
        if a is not None and b is not None:
            diffs.append(b - a)
    if not diffs:
        return None
    return {"pairs": len(diffs), "median_difference": stats.median(diffs), "wilcoxon_p": stats.wilcoxon_p(diffs)}


def compare(store: Store, baseline: str, candidate: str, metric: str = "gen_s", alpha: float = 0.05,
            factor: float = 1.05, expect_diff: list[str] | None = None, better: str | None = None) -> Comparison:
    check_settings(alpha, factor, better)
    way = better or direction(metric)
    base_side, cand_side = resolve_side(store, baseline, metric), resolve_side(store, candidate, metric)
    base, cand = _side_result(store, base_side, metric), _side_result(store, cand_side, metric)
    diffs = differences(store, base_side, cand_side)
    warnings = _factor_warnings(diffs, expect_diff)
    reasons: list[str] = []
    p = stats.mann_whitney_p(base.values, cand.values) if base.values and cand.values else None
    significant = p is not None and p < alpha
    ratio = cand.median / base.median if base.median and cand.median is not None else None
    ratio_ci = _ratio_ci(base.ci, cand.ci)
    needed = None
    min_runs = stats.min_samples(alpha)
    if base.failed_runs or cand.failed_runs:
        decision = "blocked"
        for label, side in (("baseline", base), ("candidate", cand)):
            for failed in side.failed_runs:
                reasons.append(f"{label} run {failed['run']} did not pass: {failed['status']}"
                               + (f" ({failed['first_blocker']})" if failed["first_blocker"] else ""))
    elif not base.values or not cand.values:
        decision = "blocked"
        reasons.append(f"no {metric} samples on the {'baseline' if not base.values else 'candidate'} side")
    else:
        better_by = (1 / ratio if way == "lower" else ratio) if ratio else 1.0  # > 1: the candidate is better
        if significant and better_by >= factor:
            decision = "promote"
            reasons.append(f"candidate better by {better_by:.3f}x (>= {factor}), p = {p:.3g}")
        elif significant and better_by < 1:
            decision = "reject"
            reasons.append(f"candidate worse by {1 / better_by:.3f}x, p = {p:.3g}")
        else:
            decision = "inconclusive"
            if significant:
                reasons.append(f"significant (p = {p:.3g}) but better by only {better_by:.3f}x (< {factor})")
            else:
                reasons.append(f"no significant difference (p = {p:.3g} >= {alpha}); benchstat would print ~")
            effect = abs(base.median * (factor - 1))
            needed = stats.runs_needed(base.values, cand.values, effect, alpha)
            reasons.append(f"about {needed} runs per side would see a {factor}x change with 80% power")
        small = [s for s in (base, cand) if s.n < min_runs]
        if small:
            warnings.append(f"need >= {min_runs} samples per side to detect a difference at alpha {alpha} "
                            f"(have {base.n} and {cand.n})")
    return Comparison(metric=metric, direction=way, alpha=alpha, factor=factor, baseline=base, candidate=cand,
                      ratio=ratio, ratio_ci=ratio_ci, p_value=p, significant=significant, decision=decision,
                      reasons=reasons, differences=diffs, token_differences=token_differences(store, base_side,
                                                                                              cand_side),
                      warnings=warnings, paired=_paired(base_side, cand_side),
                      runs_needed=needed, min_runs=min_runs)


def _ratio_ci(base: tuple[float, float] | None, cand: tuple[float, float] | None) -> tuple[float, float] | None:
    """A conservative interval for candidate/baseline from the two medians' 95% intervals."""
    if not base or not cand or base[0] <= 0 or not all(map(_finite, (*base, *cand))):
        return None if not base or not cand else (0.0, float("inf"))
    return (cand[0] / base[1], cand[1] / base[0])


def _finite(x: float) -> bool:
    return x not in (float("inf"), float("-inf")) and x == x


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
