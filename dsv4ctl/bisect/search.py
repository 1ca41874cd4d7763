"""The two searches of a bisection over a `bisect.Runner`: ddmin over the changes between GOOD and BAD, and the
smallest failing value of a numeric field. Each returns its result as plain JSON data (stored on the bisection,
printed by the command, drawn by the report)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import changes as changes_mod
from .run import (
    DONE,
    MEASURED,
    RUNNING,
    BudgetSpent,
    NothingToBisect,
    Plan,
    Probe,
    Runner,
    Settings,
    find_or_create,
    finished,
    inputs_key,
    running,
    subset_key,
)
from .rates import FAIL, PASS, UNRESOLVED, Rate, ends_differ, judge_point, judge_value, more_runs, runs_to_tell
from .ddmin import ddmin, worst_case_probes
from ..store import now


@dataclass
class Prepared:
    """A bisection before it runs: its inputs (what the store keeps to resume it), changes and plan."""

    kind: str
    inputs: dict[str, Any]
    changes: list[changes_mod.Change]
    plan: Plan
    source: str
    base_name: str


def rate_json(rate: Rate) -> dict[str, Any]:
    lo, hi = rate.interval
    return {"failures": rate.failures, "runs": rate.runs, "rate": rate.rate if rate.runs else None,
            "interval": [lo, hi]}


def measure_ends(runner: Runner, good: Probe, bad: Probe) -> tuple[Rate, Rate]:
    """Run GOOD and BAD `base_runs` times, then more (up to the cap) until BAD is separated from GOOD."""
    target, cap = runner.settings.base_runs, runner.settings.cap
    while True:
        measured = runner.settle([good, bad], lambda r: MEASURED if r.runs >= target else None,
                                 lambda r: target - r.runs, keep=False)
        g, b = measured[good.key][1], measured[bad.key][1]
        if ends_differ(g, b):
            runner.record(good, g, 0, PASS)
            runner.record(bad, b, 0, FAIL)
            return g, b
        rates = {"good": rate_json(g), "bad": rate_json(b)}
        if g.failures and g.rate >= b.rate:  # more runs would measure the same thing: GOOD is not good
            raise NothingToBisect(f"GOOD fails {g.text()}, as often as BAD {b.text()}, in the first {g.runs} runs "
                                  "each: GOOD must pass (check GOOD, or pick an older GOOD)", rates)
        if target >= cap:
            raise NothingToBisect(f"BAD fails {b.text()} and GOOD {g.text()}: not told apart in {cap} runs each "
                                  "(raise --cap, or check that BAD really fails)", rates)
        target = min(cap, target + runner.settings.base_runs)


def bisect_changes(runner: Runner, good_data: dict, changes: list[changes_mod.Change]) -> dict[str, Any]:
    everything = tuple(range(len(changes)))
    runner.begin_step("GOOD and BAD", [subset_key(()), subset_key(everything)])
    good = runner.probe(subset_key(()), "good", good_data, subset=())
    bad = runner.probe(subset_key(everything), "bad", changes_mod.apply_changes(good_data, changes, everything),
                       subset=everything)
    good_rate, bad_rate = measure_ends(runner, good, bad)
    first = runs_to_tell(bad_rate, runner.settings.cap)

    def oracle(subsets: list[tuple[int, ...]], what: str) -> list[str]:
        runner.begin_step(f"ddmin: {what}", [subset_key(s) for s in subsets])
        probes = [runner.probe(subset_key(s), "probe", changes_mod.apply_changes(good_data, changes, s), subset=s)
                  for s in subsets]
        settled = runner.settle(probes, lambda r: judge_point(r, good_rate, bad_rate),
                                lambda r: more_runs(r, False, first, runner.settings.cap))
        return [settled[p.key][0] for p in probes]

    stopped = None
    try:
        found = ddmin(everything, oracle)
    except BudgetSpent as exc:  # raised while measuring the ends: nothing found yet
        return _changes_result(runner, changes, good_rate, bad_rate, everything, False, str(exc))
    if not found.minimal:
        stopped = f"stopped: --max-jobs {runner.settings.max_jobs} spent before ddmin finished"
    return _changes_result(runner, changes, good_rate, bad_rate, found.culprit, found.minimal, stopped)


def _stored_probe(runner: Runner, key: str) -> dict[str, Any] | None:
    row = runner.store.db.execute("SELECT outcome, failures, runs, spec_name FROM bisect_probes WHERE "
                                  "bisection_id = ? AND key = ?", [runner.bisection_id, key]).fetchone()
    if row is None:
        return None
    return {"key": key, "outcome": row[0], "spec_name": row[3], **rate_json(Rate(row[1] or 0, row[2] or 0))}


def _changes_result(runner: Runner, changes: list, good: Rate, bad: Rate, culprit: tuple[int, ...],
                    minimal: bool, stopped: str | None) -> dict[str, Any]:
    """The culprit with its evidence: its own rate, and each one-smaller subset's (what makes it 1-minimal)."""
    evidence = _stored_probe(runner, subset_key(culprit))
    removals = []
    for index in culprit:
        rest = tuple(i for i in culprit if i != index)
        removals.append({"without": changes[index].name, "probe": _stored_probe(runner, subset_key(rest))})
    checked = [r["probe"] for r in removals]
    sure = (minimal and evidence is not None and evidence["outcome"] == FAIL
            and all(p is not None and p["outcome"] == PASS for p in checked))
    ambiguous = [r[0] for r in runner.store.db.execute(
        "SELECT key FROM bisect_probes WHERE bisection_id = ? AND outcome = ? ORDER BY id",
        [runner.bisection_id, UNRESOLVED])]
    return {"kind": "changes", "culprit": [changes[i].to_json() for i in culprit], "culprit_subset": list(culprit),
            "minimal": minimal, "sure": sure, "stopped": stopped, "good": rate_json(good), "bad": rate_json(bad),
            "evidence": evidence, "removals": removals, "ambiguous": ambiguous, "jobs": runner.jobs_spent(),
            "how_sure": _how_sure(sure, minimal, evidence, removals, ambiguous, good)}


def _how_sure(sure: bool, minimal: bool, evidence, removals, ambiguous, good: Rate) -> str:
    if evidence is None:
        return "nothing decided yet"
    shown = f"{evidence['failures']}/{evidence['runs']}"
    lo, hi = evidence["interval"]
    text = (f"the culprit fails {shown} ({lo:.0%}–{hi:.0%}, Wilson 95%) against GOOD's {good.failures}/{good.runs}; "
            f"{len(removals)} one-smaller subset(s) " +
            ("each pass, their intervals wholly below BAD's" if sure else "not all told apart from BAD"))
    if ambiguous:
        text += f"; {len(ambiguous)} probe(s) stayed ambiguous at the cap"
    if not minimal:
        text += "; not shown 1-minimal (stopped early)"
    return text


def bisect_boundary(runner: Runner, spec_data: dict, field: str, low: int, high: int) -> dict[str, Any]:
    """The smallest value of `field` in low..high whose failure rate is above the threshold (binary search by
    `width` values a round; a value that stays ambiguous is stepped around and reported)."""
    threshold, cap = runner.settings.threshold, runner.settings.cap

    def probe(value: int) -> Probe:
        return runner.probe(f"value:{value}", "value", changes_mod.set_field(spec_data, field, value), value=value)

    runner.begin_step(f"the top of the range: {field}={high}", [f"value:{high}"])
    top = probe(high)
    top_rate = runner.settle([top], lambda r: FAIL if r.runs and r.interval[0] > threshold else None,
                             lambda r: more_runs(r, False, runner.settings.base_runs, cap))[top.key][1]
    if top.outcome != FAIL:
        raise NothingToBisect(f"{field}={high} fails {top_rate.text()}: not above --threshold {threshold:g} "
                              "(raise --cap, or widen --range)", {"top": rate_json(top_rate)})
    first = runs_to_tell(top_rate, cap)
    passes: set[int] = set()
    failing, ambiguous, asked = high, set(), {high}
    candidates = [low] + _spread(range(low + 1, high), runner.settings.width, asked)
    stopped = None
    try:
        while candidates:
            runner.begin_step(f"{field} in {candidates}", [f"value:{v}" for v in candidates])
            probes = {v: probe(v) for v in candidates}
            settled = runner.settle(list(probes.values()), lambda r: judge_value(r, top_rate, threshold),
                                    lambda r: more_runs(r, False, first, cap))
            asked |= set(candidates)
            for value, p in probes.items():
                outcome = settled[p.key][0]
                if outcome == FAIL:
                    failing = min(failing, value)
                (passes if outcome == PASS else ambiguous if outcome == UNRESOLVED else set()).add(value)
            passing = max((v for v in passes if v < failing), default=None)
            if passing is None:
                break  # the start of the range does not pass: nothing to step up from
            candidates = _spread(range(passing + 1, failing), runner.settings.width, asked)
    except BudgetSpent as exc:
        stopped = str(exc)
    passing = max((v for v in passes if v < failing), default=None)
    return _boundary_result(runner, field, low, high, passing, failing, sorted(ambiguous), threshold, stopped)


def _spread(values: range, width: int, asked: set[int]) -> list[int]:
    """Up to `width` values not asked yet, cutting `values` into equal stretches (a range: never materialised)."""
    if len(values) <= width:
        return [v for v in values if v not in asked]
    return sorted({values[(len(values) * (i + 1)) // (width + 1)] for i in range(width)} - asked)


def _boundary_result(runner: Runner, field: str, low: int, high: int, passing: int | None, failing: int,
                     ambiguous: list[int], threshold: float, stopped: str | None) -> dict[str, Any]:
    below = _stored_probe(runner, f"value:{passing}") if passing is not None else None
    at = _stored_probe(runner, f"value:{failing}")
    between = [v for v in ambiguous if (passing is None or v > passing) and v < failing]
    exact = passing is not None and not between and passing == failing - 1 and stopped is None
    return {"kind": "boundary", "field": field, "range": [low, high], "threshold": threshold,
            "boundary": failing, "below": passing, "at_boundary": at, "below_boundary": below,
            "ambiguous": between, "sure": exact, "stopped": stopped, "jobs": runner.jobs_spent(),
            "how_sure": (f"{field}={failing} fails {at['failures']}/{at['runs']} ({at['interval'][0]:.0%}–"
                         f"{at['interval'][1]:.0%}), above {threshold:g}; "
                         + (f"{field}={passing} fails {below['failures']}/{below['runs']} ({below['interval'][0]:.0%}–"
                            f"{below['interval'][1]:.0%})" if below else f"nothing below passes in {low}..{failing - 1}")
                         + (f"; ambiguous between: {between}" if between else ""))}


# ---- from the command line to a stored result ---------------------------------------------------------------------


def _resolved(path) -> dict[str, Any]:
    from ..spec.load import select_point

    return select_point(path, None).snapshot()


def prepare_changes(good_path, bad_path, settings: Settings) -> Prepared:
    """The changes between GOOD and BAD (resolved specs) and the plan of their bisection; nothing recorded yet."""
    good, bad = _resolved(good_path), _resolved(bad_path)
    changes = changes_mod.changes_between(good, bad)
    if not changes:
        raise NothingToBisect(f"{good_path} and {bad_path} resolve to the same settings: nothing to bisect")
    n = len(changes)
    probes = min(worst_case_probes(n), 2 ** n - 2)
    worst = 2 * settings.cap + probes * settings.cap
    inputs = {"good": good, "bad": bad, "good_path": str(good_path), "bad_path": str(bad_path)}
    return Prepared("changes", inputs, changes, _plan("changes", f"{n} change(s)", worst, bad, settings),
                    str(bad_path), bad["name"])


def prepare_boundary(spec_path, field: str, low: int, high: int, settings: Settings) -> Prepared:
    """A numeric field's range and the plan of its search; nothing recorded yet."""
    spec = _resolved(spec_path)
    changes_mod.set_field(spec, field, low)  # refuses a path that is not a whole-number field
    changes_mod.check_field_range(spec, field, low, high)
    values = changes_mod.boundary_values_bound(low, high, settings.width)
    inputs = {"spec": spec, "spec_path": str(spec_path), "field": field, "range": [low, high]}
    return Prepared("boundary", inputs, [], _plan("boundary", f"{field} in {low}..{high}", values * settings.cap,
                                                  spec, settings), str(spec_path), spec["name"])


def _plan(kind: str, points: str, worst: int, spec: dict[str, Any], settings: Settings) -> Plan:
    hours = changes_mod.slurm_hours((spec.get("slurm") or {}).get("time"))
    nodes = (spec.get("slurm") or {}).get("nodes") or 1
    bounded = min(worst, settings.max_jobs)
    return Plan(kind, points, worst, None if hours is None else bounded * hours * nodes, settings.max_jobs)


def finished_result(store, prepared: Prepared, settings: Settings) -> dict[str, Any] | None:
    """The stored result when a bisection of these inputs has finished (printed again without a job)."""
    found = finished(store, inputs_key(prepared.kind, prepared.inputs, settings))
    return None if found is None else {**found[1], "bisection": found[0]}


def execute(store, prepared: Prepared, settings: Settings, command: str, on_progress=lambda line: None,
            bisection_id: int | None = None) -> dict[str, Any]:
    """Record (or find) the bisection, run it to its end or its budget, store and return the result. One process
    at a time runs a bisection (`running`); a finished one returns its stored result."""
    if bisection_id is None:
        bisection_id, _ = find_or_create(store, prepared.kind, prepared.inputs,
                                         [c.to_json() for c in prepared.changes], settings, command)
    with running(store, bisection_id):
        done = store.db.execute("SELECT result_json FROM bisections WHERE id = ? AND state = ?",
                                [bisection_id, DONE]).fetchone()
        if done and done[0]:
            return {**json.loads(done[0]), "bisection": bisection_id}
        runner = Runner(store, bisection_id, settings, Path(prepared.source), prepared.base_name, on_progress)
        try:
            result = _search(runner, prepared)
        except NothingToBisect as exc:  # a finished answer, stored as one: the ends do not differ
            result = nothing_result(prepared.kind, str(exc), exc.rates, runner.jobs_spent())
        result["bisection"] = bisection_id
        with store.transaction():
            store.db.execute("UPDATE bisections SET state = ?, result_json = ?, updated_at = ? WHERE id = ?",
                             [DONE if not result.get("stopped") else RUNNING, json.dumps(result), now(),
                              bisection_id])
    return result


def _search(runner: Runner, prepared: Prepared) -> dict[str, Any]:
    inputs = prepared.inputs
    if prepared.kind == "changes":
        return bisect_changes(runner, inputs["good"], prepared.changes)
    return bisect_boundary(runner, inputs["spec"], inputs["field"], *inputs["range"])


def nothing_result(kind: str, reason: str, rates: dict[str, Any], jobs: int) -> dict[str, Any]:
    """The result of a bisection whose ends do not differ: finished, not sure, with the rates that say so."""
    return {"kind": "nothing", "bisected": kind, "reason": reason, **rates, "sure": False, "stopped": None,
            "jobs": jobs, "how_sure": f"nothing to bisect: {reason}"}


def prepared_from_store(store, bisection_id: int, max_jobs: int | None = None) -> tuple[Prepared, Settings]:
    """`--resume ID`: the stored inputs and settings (a new --max-jobs replaces the stored one)."""
    from .run import load

    row = load(store, bisection_id)
    settings = Settings(**row["settings"])
    if max_jobs is not None:
        settings.max_jobs = max_jobs
    inputs = row["inputs"]
    changes = [changes_mod.Change.from_json(c) for c in row["changes"] or []]
    source = inputs.get("bad_path") or inputs.get("spec_path")
    spec = inputs.get("bad") or inputs["spec"]
    worst = 0  # a resumed bisection has shown its plan already
    return Prepared(row["kind"], inputs, changes, _plan(row["kind"], "resumed", worst, spec, settings), source,
                    spec["name"]), settings
