"""Issue 25: the read paths that show a window of a long history (history's newest commits, the newest
campaigns, a report's metrics and verdicts) answer as the full reads they replace did, on the rows they show."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dsv4ctl.analysis.history import GROUPS_SHOWN, window
from dsv4ctl.cli import app
from dsv4ctl.errors import UsageError
from dsv4ctl.report.campaign import report_data
from dsv4ctl.store import open_store
from dsv4ctl.store.queries import newest_campaigns

COMMITS = GROUPS_SHOWN + 10


def fill(path):
    store = open_store(path)
    exp = store.experiment_id("exp", "h1", "{}", "test")
    other = store.experiment_id("exp", "h2", "{}", "test")  # the same name, another spec: both rows are read
    n = 0
    for c in range(COMMITS):
        campaign = store.create_campaign(f"camp{c}", "local", "dsv4ctl submit")
        for i in range(3):
            n += 1
            run = store.add_run(campaign_id=campaign, experiment_id=other if i == 2 else exp, token=f"t{n}",
                                state="COMPLETED", backend="local", ingested=0, point_json="{}",
                                git_sha=f"{c:07x}", submitted_at=f"2026-01-{1 + c % 28:02d}T00:00:00+00:00")
            passed = i != 1 or c % 2 == 0
            store.save_verdict(run, {"status": "coherent" if passed else "degenerate", "passed": passed,
                                     "false_green": False, "metrics": {"gen_s": 10.0 + c + i / 10},
                                     "first_blocker": None if passed else {"line": 3, "kind": "loop",
                                                                           "message": "repeats"}})
    return store


def full_samples(store, metric="gen_s"):
    """The read history.samples made before issue 25: every passed run, oldest first."""
    return [row[0] for row in store.db.execute(
        "SELECT r.id FROM runs r JOIN experiments e ON e.id = r.experiment_id JOIN verdicts v ON v.run_id = r.id "
        "JOIN metrics m ON m.run_id = r.id AND m.name = ? WHERE e.name = 'exp' AND v.passed = 1 ORDER BY r.id",
        [metric])]


def test_history_window_is_the_newest_groups_of_the_full_read(tmp_path):
    store = fill(tmp_path / "r.db")
    everything = full_samples(store)
    shown, older = window(store, "exp", "gen_s")
    assert older and len({s.group for s in shown}) == GROUPS_SHOWN
    assert [s.run_id for s in shown] == everything[-len(shown):]
    assert shown[0].group == f"{COMMITS - GROUPS_SHOWN:07x}"
    whole, older = window(store, "exp", "gen_s", groups=None)
    assert not older and [s.run_id for s in whole] == everything
    cut, _ = window(store, "exp", "gen_s", up_to_run=30, groups=None)
    assert [s.run_id for s in cut] == [i for i in everything if i <= 30]


def test_history_command_says_what_it_left_out(tmp_path):
    fill(tmp_path / "r.db").close()
    result = CliRunner().invoke(app, ["history", "exp", "--json", "--db", str(tmp_path / "r.db")])
    assert result.exit_code == 0 and len(json.loads(result.stdout)["points"]) == GROUPS_SHOWN
    assert "--all" in result.stderr
    result = CliRunner().invoke(app, ["history", "exp", "--all", "--json", "--db", str(tmp_path / "r.db")])
    assert result.exit_code == 0 and len(json.loads(result.stdout)["points"]) == COMMITS
    result = CliRunner().invoke(app, ["history", "exp", "--metric", "gen", "--db", str(tmp_path / "r.db")])
    assert isinstance(result.exception, UsageError) and "did you mean 'gen_s'" in str(result.exception)


def test_newest_campaigns_are_the_head_of_the_full_count(tmp_path):
    store = fill(tmp_path / "r.db")
    assert newest_campaigns(store, 5) == store.campaigns()[:5]
    assert newest_campaigns(store) == store.campaigns()
    result = CliRunner().invoke(app, ["campaigns", "--json", "-n", "3", "--db", str(tmp_path / "r.db")])
    assert [c["name"] for c in json.loads(result.stdout)] == [f"camp{COMMITS - k}" for k in (1, 2, 3)]
    assert f"of {COMMITS} campaigns" in result.stderr
    result = CliRunner().invoke(app, ["campaigns", "--all", "--json", "--db", str(tmp_path / "r.db")])
    assert len(json.loads(result.stdout)) == COMMITS and "of" not in result.stderr


def test_report_reads_verdict_columns_as_the_verdicts_say(tmp_path):
    store = fill(tmp_path / "r.db")
    data = report_data(store, "camp3")
    for run, shown in zip(store.runs(campaign="camp3"), data.run_objects):
        verdict = store.verdict(run.id)
        assert shown["verdict"]["status"] == verdict["status"]
        assert shown["verdict"]["passed"] is verdict["passed"]
        assert shown["verdict"]["first_blocker"] == verdict["first_blocker"]
    assert data.distributions == [("exp", [store.metrics(r.id)["gen_s"] for r in store.runs(campaign="camp3")
                                           if store.verdict(r.id)["passed"]])]
    assert [h.points[-1].group for h in data.histories] == [f"{3:07x}"]
