"""How a bisection judges a point from its runs: a failure rate with a Wilson 95% interval, compared with the good
and the bad side, and how many more runs to ask for while it is undecided. Pure functions, no store.

Two rates are *separated* when each one's Wilson interval leaves out the other's observed rate: the interval is
the inversion of the score test, so each side rejects "same rate as the other" at the 5% level. A point is FAIL once
its interval leaves out GOOD's rate from above (against a GOOD that never failed: one failure). It is PASS only once its whole interval lies below BAD's
(the intervals are disjoint): a point that holds a flaky culprit and got lucky must not pass, or ddmin drops the
culprit for good (with BAD at 4/10, a clean point needs 19 runs, not the 6 that the score test alone would take).
A point still neither at its cap of runs is UNRESOLVED (ddmin's third outcome), reported as ambiguous. A FAIL
trusts GOOD's measured rate: with a GOOD that fails now and then, raise --base-runs.

A run that could not be tested (never submitted, cancelled, the node failed, no log) counts for nothing: it is
neither a pass nor a failure (git bisect's 125).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ddmin import FAIL, PASS, UNRESOLVED
from ..judge.states import normalise
from ..campaign.sweep import wilson

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
    """FAIL (its interval above GOOD's rate), PASS (its interval wholly below BAD's), or None while undecided. A
    point between the two fails: it brings failures GOOD does not have."""
    if point.runs and point.rate > good.rate and excludes(point, good.rate):
        return FAIL
    if point.runs and bad.runs and point.interval[1] < bad.interval[0]:
        return PASS
    return None


def judge_value(point: Rate, failing_end: Rate, threshold: float) -> str | None:
    """A numeric value: FAIL once its interval lies above `threshold`; PASS once its rate is at most `threshold`
    and its interval lies wholly below the failing end's (or below `threshold`)."""
    lo, hi = point.interval
    if point.runs and lo > threshold:
        return FAIL
    if point.runs and (hi < threshold or (point.rate <= threshold and hi < failing_end.interval[0])):
        return PASS
    return None


def runs_to_tell(bad: Rate, cap: int) -> int:
    """The fewest runs after which a point that never fails passes against BAD (3 against 5/5, 19 against 4/10),
    at most `cap`."""
    for n in range(1, cap + 1):
        if Rate(0, n).interval[1] < bad.interval[0]:
            return n
    return cap


def more_runs(point: Rate, decided: bool, first_batch: int, cap: int) -> int:
    """How many runs to add to a point this round: none once decided or at its cap, else a batch."""
    if decided or point.runs >= cap:
        return 0
    # Half first: a point holding the culprit usually fails within it; a clean one then gets the rest.
    half = (first_batch + 1) // 2
    wanted = half if point.runs < half else max(first_batch - point.runs, half)
    return min(wanted, cap - point.runs)


def ends_differ(good: Rate, bad: Rate) -> bool:
    """BAD fails more often than GOOD, separated: there is something to bisect."""
    return bad.rate > good.rate and separated(good, bad)


__all__ = ["FAIL", "PASS", "UNRESOLVED", "Rate", "run_outcome", "judge_point", "judge_value", "runs_to_tell",
           "more_runs", "ends_differ", "separated", "GIT_BISECT_EXIT"]
