"""Daily use: campaigns and `latest`, bad input as usage errors (exit 2, naming the known values), one JSON run
shape and JSON errors, waits that show stage and end at --timeout (exit 3), logs, and pending reasons that can never
clear."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.campaign.watch import stage_of, stuck_reason

from .conftest import FIXTURES
from .test_cli_errors import run_main
from .test_slurm import spec_file

LOGS = FIXTURES / "logs"


@pytest.fixture
def db(cli, tmp_path):
    path = str(tmp_path / "r.db")
    ok = spec_file(tmp_path, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")})
    done = cli("submit", ok, "--backend", "local", "--wait", "--db", path, "--runs-dir", tmp_path / "runs",
               "--campaign", "nightly-one")
    assert done.exit_code == 0, done.output
    cli("ingest", "--log", LOGS / "J08.log", "--sacct", LOGS / "J08.sacct", "--experiment", "report", "--db", path)
    return path


def test_campaigns_list_latest_and_the_campaign_column(cli, db):
    listed = json.loads(cli("campaigns", "--db", db, "--json").stdout)
    assert [(c["name"], c["runs"], c["passed"], c["failed"], c["running"]) for c in listed] == [
        ("nightly-one", 1, 1, 0, 0)]
    latest = json.loads(cli("runs", "--campaign", "latest", "--db", db, "--json").stdout)
    assert [r["campaign"] for r in latest] == ["nightly-one"]
    table = cli("runs", "--db", db).stdout
    assert "campaign" in table and "nightly-one" in table and "J08" in table


def test_status_and_state_match_any_case_and_unknown_ones_are_usage_errors(cli, capsys, db):
    assert len(json.loads(cli("runs", "--status", "COHERENT", "--db", db, "--json").stdout)) == 1
    assert len(json.loads(cli("runs", "--state", "completed", "--db", db, "--json").stdout)) == 2
    code, out, err = run_main(capsys, "runs", "--status", "bogus", "--db", db)
    assert code == 2 and out == "" and "known statuses: device_error" in err
    code, _, err = run_main(capsys, "runs", "--state", "DONE", "--db", db)
    assert code == 2 and "known states:" in err and "COMPLETED" in err
    code, _, err = run_main(capsys, "runs", "--campaign", "nightly-on", "--db", db)
    assert code == 2 and "did you mean 'nightly-one'?" in err


def test_an_unknown_backend_is_a_usage_error(capsys, tmp_path):
    ok = spec_file(tmp_path, "ok", {})
    code, _, err = run_main(capsys, "submit", ok, "--backend", "slrum", "--db", tmp_path / "r.db")
    assert code == 2 and "slurm, local, auto" in err


def test_json_errors_go_to_stderr_as_one_object(capsys, db):
    code, out, err = run_main(capsys, "runs", "--status", "bogus", "--db", db, "--json")
    assert code == 2 and out == ""
    assert json.loads(err)["error"]["exit_code"] == 2 and "bogus" in json.loads(err)["error"]["message"]
    code, out, err = run_main(capsys, "runs", "--no-such-option", "--json")
    assert code == 2 and json.loads(err)["error"]["message"] == "No such option: --no-such-option"


def test_one_run_shape_from_runs_show_and_status(cli, db):
    from_runs = json.loads(cli("runs", "--db", db, "--json").stdout)[0]
    from_show = json.loads(cli("show", "r1", "--db", db, "--json").stdout)
    assert from_runs == from_show
    assert isinstance(from_show["switches"], dict) and isinstance(from_show["tags"], list)
    assert isinstance(from_show["point"], dict) and not any(k.endswith("_json") for k in from_show)
    assert "Unknown" not in json.dumps(from_show) and "None assigned" not in json.dumps(from_show)


def test_a_wait_ends_at_its_timeout_with_exit_3_and_cancel_speaks_json(cli, capsys, tmp_path):
    slow = spec_file(tmp_path, "slow", {"REPLAY_SLEEP": "600"})
    db = str(tmp_path / "r.db")
    try:
        code, out, err = run_main(capsys, "submit", slow, "--backend", "local", "--wait", "--timeout", "1",
                                  "--db", db, "--runs-dir", tmp_path / "runs", "--label", "S1")
        assert code == 3 and "stopped waiting after 1 s" in err and "run 1 RUNNING" in err
        code, out, err = run_main(capsys, "logs", "S1", "-f", "--timeout", "1", "--db", db)
        assert code == 3 and "run 1 (S1) RUNNING" in err
    finally:
        cancelled = cli("cancel", "S1", "--db", db, "--json")
    assert [r["label"] for r in json.loads(cancelled.stdout)["cancelled"]] == ["S1"]


def test_stage_comes_from_the_tail_of_the_log_only(tmp_path):
    log = tmp_path / "raw.log"
    log.write_text("### STAGE: load\n" + "x" * 200_000 + "\n### STAGE: generate\nmore\n")
    assert stage_of(log) == "generate"
    log.write_text("### STAGE: load\n" + "x" * 200_000 + "\n")
    assert stage_of(log) is None  # bounded: never reads the whole file
    assert stage_of(tmp_path / "missing.log") is None


@pytest.mark.parametrize("reason,stuck", [
    ("PartitionConfig", True), ("PartitionNodeLimit", True), ("AssocMaxJobsLimit", True),
    ("QOSMaxCpuPerJobLimit", True), ("MaxCpuPerAccount", True), ("InvalidAccount", True),
    ("ReqNodeNotAvail, UnavailableNodes:node7", True), ("ReqNodeNotAvail, May be reserved for other job", False),
    ("Resources", False), ("Priority", False), ("JobHeldUser", False), ("AssocGrpCpuLimit", False)])
def test_pending_reasons_that_never_clear(reason, stuck):
    assert (stuck_reason("PENDING", reason) is not None) == stuck
    assert stuck_reason("RUNNING", reason) is None


def test_a_sweep_with_nothing_judged_says_so(cli, tmp_path):
    # a sweep needs a matrix (issue 26 m20): two points of the same slow replay
    spec = spec_file(tmp_path, "slow", {"REPLAY_SLEEP": "600"}, extra="matrix:\n  sampling.max_tokens: [16, 32]\n")
    db = str(tmp_path / "r.db")
    try:
        done = cli("sweep", spec, "--backend", "local", "--no-wait", "--db", db, "--runs-dir", tmp_path / "runs")
        assert "nothing judged yet" in done.output and "no failures" not in done.output
    finally:
        cli("cancel", "--campaign", "latest", "--db", db)


def test_shell_completion_is_offered():
    import os
    import subprocess
    import sys

    from pathlib import Path

    entry = Path(sys.executable).parent / "dsv4ctl"  # the installed command: completion is keyed on its name
    done = subprocess.run([str(entry), "--show-completion", "bash"], capture_output=True, text=True,
                          env={**os.environ, "SHELL": "/bin/bash"}, timeout=60)
    assert done.returncode == 0 and "_DSV4CTL_COMPLETE=complete_bash" in done.stdout
