"""The run commands as a user meets them: submit --wait, runs, show, verdict JOB, ingest, dry runs, exit codes."""

from __future__ import annotations

import json

from .conftest import FIXTURES
from .test_slurm import spec_file

LOGS = FIXTURES / "logs"


def test_submit_wait_runs_show_and_verdict_job(cli, tmp_path):
    ok = spec_file(tmp_path, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")})
    db = str(tmp_path / "r.db")
    result = cli("submit", ok, "--backend", "local", "--wait", "--db", db, "--runs-dir", tmp_path / "runs",
                 "--campaign", "c1")
    assert result.exit_code == 0, result.output
    assert "coherent PASSED" in result.output
    listed = json.loads(cli("runs", "--db", db, "--json").stdout)
    assert [r["experiment"] for r in listed] == ["ok"] and listed[0]["verdict"]["passed"]
    shown = json.loads(cli("show", str(listed[0]["id"]), "--db", db, "--json").stdout)
    assert shown["metrics"]["gen_s"] == 21.7 and shown["campaign"] == "c1"
    again = cli("verdict", listed[0]["job_id"], "--db", db, "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["scheduler"]["state"] == "COMPLETED"


def test_submit_wait_exits_1_when_a_run_fails(cli, tmp_path):
    bad = spec_file(tmp_path, "bad", {"REPLAY_LOG": str(LOGS / "J08.log"), "REPLAY_EXIT": "0"})
    result = cli("submit", bad, "--backend", "local", "--wait", "--db", tmp_path / "r.db", "--runs-dir",
                 tmp_path / "runs", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 1 and data["runs"][0]["verdict"]["false_green"]


def test_dry_run_writes_nothing(cli, tmp_path):
    ok = spec_file(tmp_path, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=3)
    result = cli("submit", ok, "--dry-run", "--backend", "local", "--db", tmp_path / "r.db", "--json")
    assert result.exit_code == 0 and len(json.loads(result.stdout)["runs"]) == 3
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "runs").exists()


def test_invalid_spec_is_refused_before_anything_is_recorded(cli, tmp_path):
    bad = spec_file(tmp_path, "bad", {}, extra="")
    bad.write_text(bad.read_text().replace("max_tokens: 32", "max_tokens: 1"))
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "submit", str(bad), "--backend", "local", "--db",
                           str(tmp_path / "r.db")], capture_output=True, text=True)
    assert done.returncode == 1 and "sampling.max_tokens" in done.stderr
    assert not (tmp_path / "r.db").exists()


def test_ingest_earlier_logs(cli, tmp_path):
    db = str(tmp_path / "r.db")
    result = cli("ingest", "--log", LOGS / "J08.log", "--sacct", LOGS / "J08.sacct", "--experiment", "report",
                 "--switch", "DSV4_MOE_ROUTING_Q1=1", "--db", db)
    assert result.exit_code == 0 and "FALSE GREEN" in result.stdout
    cli("ingest", "--log", LOGS / "J17.log", "--sacct", LOGS / "J17.sacct", "--experiment", "report", "--db", db)
    rows = json.loads(cli("runs", "--experiment", "report", "--db", db, "--json").stdout)
    assert [r["verdict"]["status"] for r in rows] == ["degenerate", "coherent"]
    assert rows[0]["state"] == "COMPLETED" and rows[0]["switches"] == {"DSV4_MOE_ROUTING_Q1": "1"}
    assert rows[0]["tags"] == [] and rows[0]["point"] == {} and "switches_json" not in rows[0]
    passed = json.loads(cli("runs", "--status", "coherent", "--db", db, "--json").stdout)
    assert len(passed) == 1
    # ingested runs are never polled
    assert json.loads(cli("status", "--db", db, "--json").stdout)["runs"] == []


def test_unknown_run_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    from dsv4ctl.store import open_store

    open_store(tmp_path / "r.db")
    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "show", "999", "--db", str(tmp_path / "r.db")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no run with id, label" in done.stderr and "dsv4ctl runs" in done.stderr


def test_reading_where_there_is_no_database_is_an_error_not_an_empty_table(tmp_path):
    import subprocess
    import sys

    for command in (["runs"], ["show", "1"], ["campaigns"], ["status"], ["verdict", "J17"]):
        done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *command], cwd=tmp_path, capture_output=True,
                              text=True)
        assert done.returncode == 2 and "no results database at results.db" in done.stderr, (command, done.stderr)
        assert "dsv4ctl init" in done.stderr
    assert not (tmp_path / "results.db").exists()
