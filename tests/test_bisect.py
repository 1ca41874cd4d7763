"""Bisection without a cluster: ddmin against pure oracles (exhaustive small cases and hypothesis), the rate
decisions that make it flaky-aware, what counts as a change between two specs, and git bisect's exit codes."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.bisect import changes as bc
from dsv4ctl.bisect.rates import (
    FAIL,
    PASS,
    Rate,
    ends_differ,
    judge_point,
    judge_value,
    more_runs,
    run_outcome,
    runs_to_tell,
)
from dsv4ctl.bisect.ddmin import UNRESOLVED, ddmin, split, worst_case_probes
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
               "--exit-codes", "git-bisect").exit_code == 128  # issue 26 M6: a typo aborts, never skips
    assert cli("verdict", "--log", str(logs / "J17.log"), "--exit-codes", "sometimes").exit_code == 2


# ---- issue 29 S24-S27: a bisection that cannot help stops, is stored finished, runs in one process at a time ------
# The replay payload (tests/fixtures/runtime) on the local backend: a job is a few hundred milliseconds.


def replay_pair(directory, fail_when: str, bad_env: dict[str, str], name: str = "bis") -> tuple:
    import sys
    import textwrap

    directory.mkdir(parents=True, exist_ok=True)
    good, bad = directory / "good.yaml", directory / "bad.yaml"
    good.write_text(textwrap.dedent(f"""\
        name: {name}-good
        platform: cpu
        model: {{path: /models/none}}
        requests:
          - messages: [{{role: user, content: hi}}]
        sampling: {{max_tokens: 16}}
        environment:
          python: {sys.executable}
          runtime_dir: {FIXTURES / "runtime"}
          env: {{REPLAY_FAIL_WHEN: "{fail_when}", REPLAY_SEED: "0"}}
        """), encoding="utf-8")
    env = ", ".join(f'{k}: "{v}"' for k, v in bad_env.items())
    bad.write_text(f"extends: good.yaml\nname: {name}-bad\nenvironment:\n  env: {{{env}}}\n", encoding="utf-8")
    return good, bad


def run_bisect(directory, *args: str, stdin=None, wait: bool = True):
    import subprocess
    import sys

    from .conftest import ROOT

    argv = [sys.executable, "-m", "dsv4ctl.cli", "bisect", *map(str, args), "--backend", "local", "--db",
            str(directory / "r.db"), "--runs-dir", str(directory / "runs")]
    proc = subprocess.Popen(argv, cwd=ROOT, text=True, stdin=stdin or subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_a_good_that_fails_as_often_as_bad_stops_after_the_base_runs_and_is_stored_finished(tmp_path, capsys):
    import json

    from dsv4ctl.cli import main
    from dsv4ctl.store import open_store

    good, bad = replay_pair(tmp_path, "batch>=1:1.0", {"K1": "1", "K2": "1"})  # every run fails, GOOD's too
    done = run_bisect(tmp_path, good, bad, "--base-runs", "5", "--yes", "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["kind"] == "nothing" and result["jobs"] == 10  # the base runs only, not 40
    assert result["good"]["failures"] == 5 and "as often as BAD" in result["reason"]
    store = open_store(tmp_path / "r.db")
    assert store.db.execute("SELECT state FROM bisections WHERE id = 1").fetchone()[0] == "done"
    with pytest.raises(SystemExit):
        main(["bisect-report", "1", "--db", str(tmp_path / "r.db")])
    page = capsys.readouterr().out
    assert "Nothing to bisect: GOOD fails 5/5" in page and "has not finished" not in page
    again = run_bisect(tmp_path, "--resume", "1", "--yes")
    assert again.returncode == 1 and "nothing to bisect" in again.stdout and "step 1" not in again.stderr


def test_a_finished_bisection_prints_its_result_without_yes_and_without_a_job(tmp_path):
    good, bad = replay_pair(tmp_path, "K2=1:1.0", {"K1": "1", "K2": "1"})
    first = run_bisect(tmp_path, good, bad, "--yes")
    assert first.returncode == 0 and "environment.env.K2" in first.stdout, first.stderr[-2000:]
    jobs = first.stdout.split("jobs spent: ")[1].split()[0]
    again = run_bisect(tmp_path, good, bad)  # no terminal and no --yes: nothing to confirm, nothing to submit
    assert again.returncode == 0, again.stderr
    assert "environment.env.K2" in again.stdout and f"jobs spent: {jobs}" in again.stdout
    assert "plan:" not in again.stderr and "--yes" not in again.stderr


def test_resume_with_other_specs_is_refused(tmp_path):
    good, bad = replay_pair(tmp_path, "K2=1:1.0", {"K1": "1", "K2": "1"})
    assert run_bisect(tmp_path, good, bad, "--yes").returncode == 0
    other = tmp_path / "other-bad.yaml"
    other.write_text("extends: good.yaml\nname: other-bad\nenvironment:\n  env: {K3: \"1\"}\n", encoding="utf-8")
    refused = run_bisect(tmp_path, "--resume", "1", good, other, "--yes")
    assert refused.returncode == 2 and "--resume 1 is the bisection of" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""
    same = run_bisect(tmp_path, "--resume", "1", good, bad, "--yes")
    assert same.returncode == 0 and "environment.env.K2" in same.stdout, same.stderr


def test_a_bisection_held_by_another_process_is_refused_with_its_pid(tmp_path):
    import os

    from dsv4ctl.bisect.run import running
    from dsv4ctl.store import open_store

    good, bad = replay_pair(tmp_path, "batch>=1:1.0", {"K1": "1"})
    first = run_bisect(tmp_path, good, bad, "--yes")  # creates bisection 1 (nothing to bisect, finished)
    assert first.returncode == 1
    store = open_store(tmp_path / "r.db")
    store.db.execute("UPDATE bisections SET state = 'running', result_json = NULL WHERE id = 1")
    store.db.commit()
    with running(store, 1):
        busy = run_bisect(tmp_path, "--resume", "1", "--yes")
    assert busy.returncode == 2, busy.stderr
    assert f"bisection 1 is being run by pid {os.getpid()}" in busy.stderr
    assert run_bisect(tmp_path, "--resume", "1", "--yes").returncode == 1  # released: it runs again


def test_two_processes_on_one_bisection_never_submit_a_round_twice(tmp_path):
    import json

    good, bad = replay_pair(tmp_path, "K5=1:1.0", {f"K{i}": "1" for i in range(1, 9)})
    procs = [run_bisect(tmp_path, good, bad, "--yes", "--json", wait=False) for _ in range(2)]
    outs = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    finished = [json.loads(out) for code, out, _ in outs if code == 0]
    refused = [err for code, _, err in outs if code == 2]
    assert finished and len(finished) + len(refused) == 2, outs
    assert all("is being run by pid" in err for err in refused)
    alone_tmp = tmp_path / "alone"
    alone = json.loads(run_bisect(alone_tmp, *replay_pair(alone_tmp, "K5=1:1.0",
                                                          {f"K{i}": "1" for i in range(1, 9)}),
                                  "--yes", "--json").stdout)
    assert {r["jobs"] for r in finished} == {alone["jobs"]}  # the same jobs as one process alone spends
    assert [c["name"] for c in finished[0]["culprit"]] == ["environment.env.K5"]


def test_unknown_bisections_exit_2(tmp_path, capsys):
    from dsv4ctl.cli import main
    from dsv4ctl.store import open_store

    open_store(tmp_path / "r.db")
    for argv in (["bisect-report", "999"], ["bisect", "--resume", "999", "--yes"]):
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--db", str(tmp_path / "r.db")])
        assert exited.value.code == 2 and "no bisection 999" in capsys.readouterr().err


def test_a_range_beyond_the_limit_names_the_limit():
    with pytest.raises(UsageError, match=r"1000000000 is outside the values a range may hold "
                                         r"\(-999999999\.\.999999999\)"):
        bc.parse_range("1..1000000000")
    with pytest.raises(UsageError, match="outside"):
        bc.parse_range("1.." + "9" * 5000)
    assert bc.parse_range("-5..3") == (-5, 3)  # the field's own bounds are the spec's business


def test_a_range_is_checked_against_the_fields_own_bounds(write_spec):
    from dsv4ctl.spec.load import select_point

    from .conftest import BASE_SPEC

    spec = select_point(write_spec(BASE_SPEC), None).snapshot()
    bc.check_field_range(spec, "batch", 1, 8)
    with pytest.raises(UsageError, match=r"batch=-5: -5 is below the minimum 1"):
        bc.check_field_range(spec, "batch", -5, 3)
    with pytest.raises(UsageError, match=r"sampling.max_tokens=0: 0 is below the minimum 1"):
        bc.check_field_range(spec, "sampling.max_tokens", 0, 16)
