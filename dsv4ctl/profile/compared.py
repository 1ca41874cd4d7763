"""`compare --profile`: the A/B of the profiles of the runs `compare` compared. The sides are compare's own (an
A/B campaign's sides, cancelled runs set aside); a run that did not pass its verdict is left out, as compare
leaves its speed out; each passed run is one sample (its stored breakdown under the current rules, else its
traces read and stored), and the statistics and gate are `dsv4ctl profile A B`'s (diff.diff_profiles)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import Dsv4Error
from .categories import RuleSet, load_rules
from .diff import Gate, ProfileDiff, diff_profiles
from .sources import NoProfile


@dataclass
class SideProfiles:
    """One side's profiled runs: each a list of breakdowns (one per rank), and why the others are left out."""

    name: str
    runs: list[int]
    profiles: list[list[Any]] = field(default_factory=list)
    profiled_runs: list[int] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


@dataclass
class ProfileComparison:
    """What `compare --profile` adds: the A/B of profiles, or why there is none (`error`)."""

    baseline: SideProfiles
    candidate: SideProfiles
    diff: ProfileDiff | None
    error: str | None
    gate: Gate

    @property
    def changed(self) -> bool:
        return self.diff is not None and any(r.changed for r in self.diff.rows)

    def notes(self) -> list[str]:
        return (self.diff.notes if self.diff else []) + self.baseline.left_out + self.candidate.left_out

    def to_json(self) -> dict[str, Any]:
        """One shape with or without a result: `rows` empty and `error` said when no A/B could be made."""
        diff = self.diff.to_json() if self.diff else {}
        return {"baseline": self.baseline.name, "candidate": self.candidate.name,
                "profiled": {"baseline": self.baseline.profiled_runs, "candidate": self.candidate.profiled_runs},
                "rules_hash": diff.get("rules_hash"),
                "gate": {"alpha": self.gate.alpha, "min_relative": self.gate.min_relative,
                         "min_us": self.gate.min_us},
                "rows": diff.get("rows", []), "explains": diff.get("explains", []),
                "explained_share": diff.get("explained_share"), "changed": self.changed, "error": self.error,
                "notes": self.notes()}


def _side(store, label: str, runs, rules: RuleSet) -> SideProfiles:
    """The side's passed runs' profiles; a failed run, a run never profiled or an unreadable trace is left out
    and said so (the first few by run, then a count)."""
    from .targets import profile_run

    failed = {f["run"] for f in runs.failed_runs}
    side = SideProfiles(runs.name, list(runs.runs))
    if failed:
        side.left_out.append(f"{label}: {len(failed)} run(s) that did not pass their verdict are left out of the "
                             f"profile A/B ({_ids(sorted(failed))}): the profile of a broken run is not compared")
    never: list[int] = []
    for row in store.runs_by_ids([i for i in runs.runs if i not in failed]):
        try:
            p = profile_run(store, row, rules)
        except NoProfile:
            never.append(row.id)
            continue
        except Dsv4Error as exc:  # a trace that is cut, not JSON, too large: that run only
            side.left_out.append(f"{label} run {row.id}: its trace could not be read ({exc}); left out")
            continue
        side.profiles.append(p.ranks)
        side.profiled_runs.append(row.id)
    if never:
        side.left_out.append(f"{label}: {len(never)} passed run(s) have no profile traces ({_ids(never)}): "
                             "give the spec a `profile:` section to profile them")
    return side


def _ids(ids: list[int], shown: int = 6) -> str:
    return "runs " + ", ".join(map(str, ids[:shown])) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def compare_profiles(store, comparison, rules: RuleSet | None = None, gate: Gate | None = None) -> ProfileComparison:
    """The A/B of profiles over the runs of `comparison` (analysis.compare.Comparison), at its alpha unless a
    gate is given; relative and absolute floors are `profile A B`'s defaults (5%, 50 us)."""
    rules = rules or load_rules()
    gate = gate or Gate(alpha=comparison.alpha)
    base = _side(store, "baseline", comparison.baseline, rules)
    cand = _side(store, "candidate", comparison.candidate, rules)
    empty = [label for label, s in (("baseline", base), ("candidate", cand)) if not s.profiles]
    if empty:
        return ProfileComparison(base, cand, None, f"no profiled run that passed on the {' and the '.join(empty)} "
                                                   "side: no profile A/B", gate)
    try:
        diff = diff_profiles(base.name, base.profiles, cand.name, cand.profiles, gate)
    except Dsv4Error as exc:  # a CPU side against a GPU one
        return ProfileComparison(base, cand, None, str(exc), gate)
    return ProfileComparison(base, cand, diff, None, gate)
