"""Bisection without a cluster: ddmin against pure oracles (exhaustive small cases and hypothesis), the rate
decisions that make it flaky-aware, what counts as a change between two specs, and git bisect's exit codes."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl import bisect_changes as bc
from dsv4ctl.bisect_rates import (FAIL, PASS, Rate, ends_differ, judge_point, judge_value, more_runs, run_outcome,
                                  runs_to_tell)
from dsv4ctl.ddmin import UNRESOLVED, ddmin, split, worst_case_probes
from dsv4ctl.errors import UsageError

from .conftest import FIXTURES


def oracle_of(failing_sets: list[frozenset[int]], asked: list | None = None):
    """A deterministic monotone oracle: a subset fails when it holds one of `failing_sets`."""
    def oracle(subsets, what):
        if asked is not None:
            asked.append(list(subsets))
        return [FAIL if any(f <= set(s) for f in failing_sets) else PASS for s in subsets]
    return oracle


def one_minimal(culprit: tuple[int, ...], failing_sets) -> bool:
    fails = lambda s: any(f <= set(s) for f in failing_sets)  # noqa: E731
    return fails(culprit) and all(not fails([c for c in culprit if c != x]) for x in culprit)


@pytest.mark.parametrize("n", range(1, 7))
def test_ddmin_finds_every_single_culprit_set_exactly(n):
    """With one minimal failing set S among n changes (monotone), ddmin returns S itself, for every S."""
    for size in range(1, n + 1):
        for culprit in itertools.combinations(range(n), size):
            found = ddmin(tuple(range(n)), oracle_of([frozenset(culprit)]))
            assert found.culprit == culprit and found.minimal


def test_ddmin_finds_a_pair_that_only_fails_together():
    asked: list = []
    found = ddmin(tuple(range(8)), oracle_of([frozenset({1, 6})], asked))
    assert found.culprit == (1, 6)
    assert sum(len(r) for r in asked) <= worst_case_probes(8)


def test_one_culprit_among_8_costs_few_probes():
    asked: list = []
    assert ddmin(tuple(range(8)), oracle_of([frozenset({5})], asked)).culprit == (5,)
    assert sum(len(r) for r in asked) == 6  # halves, then quarters, then singletons: 2 per level


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.sets(st.integers(0, n - 1), min_size=1), min_size=1, max_size=4))))
def test_ddmin_result_is_a_failing_1_minimal_subset(case):
    n, sets = case
    failing = [frozenset(s) for s in sets]
    found = ddmin(tuple(range(n)), oracle_of(failing))
    assert found.minimal and one_minimal(found.culprit, failing)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 9), st.data())
def test_ddmin_with_unresolved_outcomes_still_returns_a_failing_subset(n, data):
    """UNRESOLVED (an invalid probe spec, an ambiguous rate) is neither: the result still fails, and no single
    removal of it was seen to fail."""
    culprit = frozenset(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    unresolved = data.draw(st.sets(st.frozensets(st.integers(0, n - 1)), max_size=6))
    seen: dict = {}

    def oracle(subsets, what):
        out = [UNRESOLVED if frozenset(s) in unresolved else FAIL if culprit <= set(s) else PASS for s in subsets]
        seen.update(zip(subsets, out))
        return out

    found = ddmin(tuple(range(n)), oracle)
    assert culprit <= set(found.culprit)
    for x in found.culprit:
        rest = tuple(c for c in found.culprit if c != x)
        assert seen.get(rest) != FAIL


def test_split_covers_in_order():
    assert split((0, 1, 2, 3, 4), 2) == [(0, 1, 2), (3, 4)]
    assert split((0, 1, 2), 3) == [(0,), (1,), (2,)]


# ---- rates -------------------------------------------------------------------------------------------------------


def test_a_single_failure_is_told_from_a_good_side_that_never_fails():
    good, bad = Rate(0, 5), Rate(5, 5)
    assert judge_point(Rate(1, 1), good, bad) == FAIL
    assert judge_point(Rate(0, 2), good, bad) is None  # 0/2 reaches 66%, BAD's interval starts at 57%
    assert judge_point(Rate(0, 3), good, bad) == PASS and runs_to_tell(bad, 20) == 3


def test_a_flaky_bad_side_needs_many_clean_runs_before_a_pass():
    """A point holding a 30% culprit passes 6 runs by luck 12% of the time: a pass needs disjoint intervals."""
    good, bad = Rate(0, 10), Rate(4, 10)
    assert runs_to_tell(bad, 30) == 19
    assert judge_point(Rate(0, 6), good, bad) is None and judge_point(Rate(0, 18), good, bad) is None
    assert judge_point(Rate(0, 19), good, bad) == PASS
    assert judge_point(Rate(1, 3), good, bad) == FAIL


def test_an_ambiguous_point_stays_undecided():
    good, bad = Rate(1, 10), Rate(5, 10)
    assert judge_point(Rate(2, 8), good, bad) is None


def test_more_runs_gives_half_first_then_the_rest_and_stops_at_the_cap():
    assert more_runs(Rate(0, 0), False, 9, 20) == 5
    assert more_runs(Rate(0, 5), False, 9, 20) == 5 and more_runs(Rate(0, 9), False, 9, 20) == 5
    assert more_runs(Rate(0, 18), False, 9, 20) == 2
    assert more_runs(Rate(0, 20), False, 9, 20) == 0 and more_runs(Rate(1, 2), True, 9, 20) == 0


def test_ends_must_differ():
    assert ends_differ(Rate(0, 10), Rate(3, 10))
    assert not ends_differ(Rate(0, 5), Rate(1, 5)) and not ends_differ(Rate(3, 5), Rate(0, 5))


def test_a_value_is_judged_against_the_threshold():
    top = Rate(7, 10)
    assert judge_value(Rate(2, 2), top, 0.1) == FAIL
    assert judge_value(Rate(0, 2), top, 0.1) is None  # 0/2 reaches 66%: not below 7/10's 40%
    assert judge_value(Rate(0, 6), top, 0.1) == PASS
    assert judge_value(Rate(1, 5), top, 0.1) is None  # 20% is above the threshold but not surely


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 60), st.integers(1, 60), st.integers(0, 60),
       st.integers(1, 60))
def test_rate_decisions_never_contradict_the_sides(pf, pn, gf, gn, bf, bn):
    point, good, bad = Rate(min(pf, pn), pn), Rate(min(gf, gn), gn), Rate(min(bf, bn), bn)
    decision = judge_point(point, good, bad)
    if decision == FAIL:
        assert point.rate > good.rate
    if decision == PASS:
        assert point.rate < bad.rate and point.interval[1] < bad.interval[0]
    if point.runs == 0:
        assert decision is None


@pytest.mark.parametrize("state,passed,log,expected", [
    ("COMPLETED", True, True, "passed"), ("FAILED", False, True, "failed"), ("TIMEOUT", False, True, "failed"),
    ("OUT_OF_MEMORY", False, True, "failed"), ("CANCELLED by 0", False, True, "untestable"),
    ("NODE_FAIL", False, True, "untestable"), ("SUBMIT_FAILED", None, False, "untestable"),
    ("COMPLETED", True, False, "untestable"), ("COMPLETED", None, True, "untestable")])
def test_what_could_not_be_tested(state, passed, log, expected):
    assert run_outcome(state, passed, log) == expected


# ---- changes -----------------------------------------------------------------------------------------------------


def test_changes_are_field_paths_and_apply_back():
    good = {"name": "a", "switches": {"X": 1}, "sampling": {"max_tokens": 16, "seed": None},
            "environment": {"env": {"A": "1"}}, "tags": ["x"]}
    bad = {"name": "b", "switches": {"Y": 1}, "sampling": {"max_tokens": 20, "seed": None},
           "environment": {"env": {"A": "1", "B": "2"}}, "tags": []}
    changes = bc.changes_between(good, bad)
    assert [c.name for c in changes] == ["environment.env.B", "sampling.max_tokens", "switches.X", "switches.Y"]
    assert changes[2].bad_missing and changes[3].good_missing
    everything = bc.apply_changes(good, changes, tuple(range(4)))
    assert {k: v for k, v in everything.items() if k not in ("name", "tags")} == \
        {k: v for k, v in bad.items() if k not in ("name", "tags")}
    assert bc.apply_changes(good, changes, ()) == good
    assert [bc.Change.from_json(c.to_json()) for c in changes] == changes


def test_a_numeric_field_must_be_a_whole_number_field():
    spec = {"batch": None, "sampling": {"max_tokens": 16, "temperature": 0.0}}
    assert bc.set_field(spec, "batch", 8)["batch"] == 8
    assert bc.set_field(spec, "sampling.max_tokens", 3)["sampling"]["max_tokens"] == 3
    for bad in ("nope", "sampling.temperature", "sampling.max_tokens.x", "batch.x"):
        with pytest.raises(UsageError):
            bc.set_field(spec, bad, 1)


@pytest.mark.parametrize("text,hours", [("30", 0.5), ("1:30", 1.5 / 60), ("02:00:00", 2.0), ("1-00", 24.0),
                                         ("1-02:30", 26.5), ("", None), (None, None), ("x", None)])
def test_slurm_time_in_hours(text, hours):
    found = bc.slurm_hours(text)
    assert found == hours or (hours is not None and math.isclose(found, hours))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_hostile_ranges_and_times_never_crash(text):
    try:
        low, high = bc.parse_range(text)
        assert low < high
    except UsageError as exc:
        assert "\n" not in str(exc)
    hours = bc.slurm_hours(text)
    assert hours is None or hours >= 0


def test_boundary_bound_covers_a_search():
    assert bc.boundary_values_bound(1, 64, 3) <= 2 + 3 * 4
    assert bc.boundary_values_bound(1, 3, 3) == 3


# ---- git bisect exit codes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("job,code", [("J17", 0), ("J09", 1), ("J05", 1)])
def test_verdict_exit_codes_for_git_bisect(cli, job, code):
    logs = FIXTURES / "logs"
    done = cli("verdict", "--log", str(logs / f"{job}.log"), "--sacct", str(logs / f"{job}.sacct"),
               "--exit-codes", "git-bisect")
    assert done.exit_code == code, done.output


def test_a_cancelled_job_could_not_be_tested(cli, tmp_path):
    logs = FIXTURES / "logs"
    sacct = tmp_path / "c.sacct"
    sacct.write_text("JobID|State|ExitCode|Elapsed|MaxRSS\nJ17|CANCELLED by 0|0:15|00:01:00|\n")
    done = cli("verdict", "--log", str(logs / "J17.log"), "--sacct", str(sacct), "--exit-codes", "git-bisect")
    assert done.exit_code == 125, done.output
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert cli("verdict", "--log", str(empty), "--exit-codes", "git-bisect").exit_code == 125
    assert cli("verdict", "no-such-run", "--db", str(tmp_path / "r.db"),
               "--exit-codes", "git-bisect").exit_code == 125
    assert cli("verdict", "--log", str(logs / "J17.log"), "--exit-codes", "sometimes").exit_code == 2
