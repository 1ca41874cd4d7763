"""How a bisection judges a point from its runs: a failure rate with a Wilson 95% interval, compared with the good
and the bad side, and how many more runs to ask for while it is undecided. Pure functions, no store.

Two rates are *separated* when each one's Wilson interval leaves out the other's observed rate: the interval is
the inversion of the score test, so each side rejects "same rate as the other" at the 5% level. A point is FAIL once
it fails more often than GOOD and is separated from it, PASS once it fails less often than BAD and is separated from
it; a point still neither at its cap of runs is UNRESOLVED (ddmin's third outcome), reported as ambiguous.

A run that could not be tested (never submitted, cancelled, the node failed, no log) counts for nothing: it is
neither a pass nor a failure (git bisect's 125).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ddmin import FAIL, PASS, UNRESOLVED
from .judge.states import normalise
from .sweep import wilson

# Final states that say nothing about the code: the job was stopped from outside or never ran. TIMEOUT and
# OUT_OF_MEMORY stay failures: a hang or a leak can be the bug being looked for.
UNTESTABLE_STATES = frozenset({"SUBMIT_FAILED", "LOST", "CANCELLED", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED",
                               "DEADLINE", "REVOKED"})
PASSED, FAILED, UNTESTABLE = "passed", "failed", "untestable"
GIT_BISECT_EXIT = {PASSED: 0, FAILED: 1, UNTESTABLE: 125}


def run_outcome(state: str | None, passed: bool | None, has_log: bool) -> str:
    """passed / failed / untestable for one judged run (`passed` None: no verdict)."""
    if normalise(state or "") in UNTESTABLE_STATES or not has_log or passed is None:
        return UNTESTABLE
    return PASSED if passed else FAILED


@dataclass(frozen=True)
class Rate:
    """Failures among the testable runs of a point."""

    failures: int
    runs: int

    @property
    def rate(self) -> float:
        return self.failures / self.runs if self.runs else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.failures, self.runs)

    def text(self) -> str:
        lo, hi = self.interval
        return f"{self.failures}/{self.runs} ({lo:.0%}–{hi:.0%})" if self.runs else "0/0"


def excludes(rate: Rate, value: float) -> bool:
    lo, hi = rate.interval
    return rate.runs > 0 and not lo <= value <= hi


def separated(a: Rate, b: Rate) -> bool:
    """Each one's interval leaves out the other's rate (both measured)."""
    return a.runs > 0 and b.runs > 0 and excludes(a, b.rate) and excludes(b, a.rate)


def judge_point(point: Rate, good: Rate, bad: Rate) -> str | None:
    """FAIL (fails more than GOOD, separated), PASS (less than BAD, separated), or None while undecided. A point
    between the two and separated from both fails: it brings failures GOOD does not have."""
    if point.runs and point.rate > good.rate and separated(point, good):
        return FAIL
    if point.runs and point.rate < bad.rate and separated(point, bad):
        return PASS
    return None


def judge_value(point: Rate, failing_end: Rate, threshold: float) -> str | None:
    """A numeric value: FAIL once its interval lies above `threshold`; PASS once its rate is at most `threshold`
    and it is separated below the failing end (or its whole interval lies below `threshold`)."""
    lo, hi = point.interval
    if point.runs and lo > threshold:
        return FAIL
    if point.runs and (hi < threshold or (point.rate <= threshold and point.rate < failing_end.rate
                                          and separated(point, failing_end))):
        return PASS
    return None


def runs_to_tell(bad: Rate, cap: int) -> int:
    """The fewest runs after which a point that never fails is separated from BAD: the first batch a point gets
    (1 against a bad side that always fails, 9 against one that fails 30% of the time), at most `cap`."""
    for n in range(1, cap + 1):
        if separated(Rate(0, n), bad):
            return n
    return cap


def more_runs(point: Rate, decided: bool, first_batch: int, cap: int) -> int:
    """How many runs to add to a point this round: none once decided or at its cap, else a batch."""
    if decided or point.runs >= cap:
        return 0
    return min(first_batch if point.runs == 0 else max(1, first_batch // 2 or 1), cap - point.runs)


def ends_differ(good: Rate, bad: Rate) -> bool:
    """BAD fails more often than GOOD, separated: there is something to bisect."""
    return bad.rate > good.rate and separated(good, bad)


def final_outcome(decision: str | None) -> str:
    return decision or UNRESOLVED


__all__ = ["FAIL", "PASS", "UNRESOLVED", "Rate", "run_outcome", "judge_point", "judge_value", "runs_to_tell",
           "more_runs", "ends_differ", "separated", "GIT_BISECT_EXIT"]
