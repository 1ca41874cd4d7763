"""The first hour as a newcomer meets it: a grouped --help whose summaries fit 80 columns, options accepted before
the command, and tables that fit the terminal (long cells elided in the middle, never folded; --wide whole)."""

from __future__ import annotations

import os
import subprocess
import sys

from dsv4ctl.cli import hoist_command_options
from dsv4ctl.report.output import elide, fit_widths

from .conftest import FIXTURES

DSV4CTL = [sys.executable, "-m", "dsv4ctl.cli"]


def run(*args: str, cwd=None, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("DSV4CTL_WIDE", None)
    return subprocess.run([*DSV4CTL, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)


def test_help_is_grouped_and_every_summary_fits_80_columns():
    result = run("--help")
    assert result.returncode == 0
    for group in ("Run:", "Inspect:", "Analyse:", "Bisect:", "Set up:"):
        assert group in result.stdout
    lines = result.stdout.splitlines()
    commands = lines[lines.index("Run:"):]
    assert all(len(line) <= 80 for line in commands), [line for line in commands if len(line) > 80]
    assert not any(line.rstrip().endswith("...") for line in commands)
    # Every registered command is listed once, in a group.
    from dsv4ctl.cli import app
    import typer

    names = sorted(typer.main.get_command(app).commands)
    listed = [line.split()[0] for line in commands if line.startswith("  ") and not line.startswith("   ")]
    assert sorted(listed) == names


def test_command_options_before_the_command():
    assert hoist_command_options(["--db", "r.db", "runs", "-n", "3"]) == ["runs", "-n", "3", "--db", "r.db"]
    assert hoist_command_options(["--db=r.db", "--json", "show", "J1"]) == ["show", "J1", "--db=r.db", "--json"]
    assert hoist_command_options(["--debug", "--db", "x", "verdict", "--", "a"]) == \
        ["--debug", "verdict", "--db", "x", "--", "a"]
    assert hoist_command_options(["runs", "--db", "x"]) == ["runs", "--db", "x"]


def test_db_before_the_command_is_the_same_database(tmp_path):
    db = tmp_path / "r.db"
    ingest = run("ingest", "--log", FIXTURES / "logs" / "J17.log", "--experiment", "x", "--db", db)
    assert ingest.returncode == 0, ingest.stderr
    before = run("--db", db, "runs", "--json")
    after = run("runs", "--json", "--db", db)
    assert before.returncode == 0 and before.stdout == after.stdout and '"id": 1' in before.stdout


def test_elide_keeps_both_ends():
    assert elide("cpu-smoke-20261201-2116", 12) == "cpu-sm…-2116"
    assert len(elide("cpu-smoke-20261201-2116", 12)) == 12
    assert elide("short", 12) == "short"


def test_widest_column_gives_way_first():
    assert fit_widths([3, 40, 9], [3, 6, 6], 30) == [3, 18, 9]
    assert fit_widths([3, 40, 9], [3, 6, 6], 100) == [3, 40, 9]
    assert fit_widths([10, 10], [8, 8], 4) == [8, 8]  # never below a minimum


def test_runs_at_80_columns_never_fold(tmp_path):
    db = tmp_path / "r.db"
    name = "a-very-long-experiment-name-that-would-fold-every-cell-of-the-table"
    for log in ("J17", "J08"):
        assert run("ingest", "--log", FIXTURES / "logs" / f"{log}.log", "--sacct", FIXTURES / "logs" / f"{log}.sacct",
                   "--experiment", name, "--db", db).returncode == 0
    table = run("runs", "--db", db).stdout.splitlines()
    assert all(len(line) <= 80 for line in table), table
    rows = [line for line in table if line.split()[:2] in (["1", "J17"], ["2", "J08"])]
    assert len(rows) == 2  # one line per run: nothing folded onto a second line
    assert "COMPLETED" in rows[0] and "…" in rows[0]
    whole = run("runs", "--db", db, "--wide").stdout
    assert "…" not in whole, whole


def test_a_folder_or_a_device_as_database_is_said_plainly(tmp_path):
    folder = run("show", "latest", "--db", tmp_path)
    assert folder.returncode != 0 and "is a folder, not a database file" in folder.stderr
    device = run("runs", "--db", "/dev/null")
    assert device.returncode != 0 and "is not a regular file" in device.stderr
    assert "rollback" not in device.stderr and "Traceback" not in device.stderr + folder.stderr
