"""What `dsv4ctl profile` is pointed at, turned into profiles: a trace file or folder (read, never stored), or
runs in the store (`12`, `J17`, `campaign:NAME`, an experiment: the sides `compare` takes), whose breakdowns are
read from the store under the current rules, or from their traces and then stored beside their verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .breakdown import Breakdown, read_breakdown
from .categories import RuleSet
from .sources import NoProfile, TraceSet, from_path, from_run
from .store import load_profiles, save_profile


@dataclass
class Profiled:
    """One profiled thing: a run (with its verdict) or a set of trace files; one breakdown per rank."""

    label: str
    window: str
    ranks: list[Breakdown]
    run_id: int | None = None
    verdict: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def read_set(traces: TraceSet, rules: RuleSet) -> list[Breakdown]:
    from .sources import rank_hint

    found = [read_breakdown(p, rules, rank=None) for p in traces.files]
    ranks = [b.rank for b in found]
    if len(set(ranks)) < len(ranks):  # several files claim one rank (no distributedInfo): number them by name
        for b, path in zip(found, traces.files):
            hint = rank_hint(path)
            b.rank = hint if hint is not None else found.index(b)
    return sorted(found, key=lambda b: b.rank)


def profile_run(store, run, rules: RuleSet, keep: bool = True, again: bool = False) -> Profiled:
    """A run's profile: stored rows under these rules, else its traces read (and stored when `keep`)."""
    stored = [] if again else load_profiles(store, run.id, rules.digest)
    if stored:
        window = stored[0].meta.get("window", "run")
        ranks = [b for b in stored if b.meta.get("window") == window]
    else:
        traces = from_run(run)
        ranks, window = read_set(traces, rules), traces.window
        if keep and not store.read_only:
            for b in ranks:
                save_profile(store, run.id, window, b)
    verdict, notes = judged(store, run)
    return Profiled(str(run.label or run.id), window, ranks, run.id, verdict, notes)


def judged(store, run) -> tuple[dict[str, Any] | None, list[str]]:
    """The run's verdict (status, passed) and what its profile must say about it: not judged yet, or FAILED."""
    summary = store.verdict_summaries([run.id]).get(run.id)
    verdict = None if summary is None else {"status": summary["status"], "passed": summary["passed"]}
    notes = []
    if verdict is None:
        notes.append(f"run {run.label or run.id} is not judged yet: its profile says nothing about correctness")
    elif not verdict["passed"]:
        notes.append(f"run {run.label or run.id} FAILED its verdict ({verdict['status']}): this profile is of a "
                     "broken run")
    return verdict, notes


def resolve(store_opener, target: str, rules: RuleSet, keep: bool = True, again: bool = False) -> list[Profiled]:
    """A target's profiles: one for a trace file or folder, one per run for a store reference."""
    traces = from_path(target)
    if traces is not None:
        return [Profiled(target, traces.window, read_set(traces, rules))]
    from ..analysis.sides import resolve_side

    store = store_opener()
    side = resolve_side(store, target)
    runs = store.runs_by_ids([r.id for r in side.runs])
    found, missing = [], []
    for run in runs:
        try:
            found.append(profile_run(store, run, rules, keep, again))
        except NoProfile as exc:
            missing.append(str(exc))
    if not found:
        raise NoProfile(missing[0] if len(missing) == 1 else f"{target}: none of its {len(runs)} runs has a "
                        f"profile ({missing[0] if missing else 'no runs'})")
    if missing:
        found[0].notes.append(f"{len(missing)} of {len(runs)} runs of {target} have no profile and are left out")
    return found
