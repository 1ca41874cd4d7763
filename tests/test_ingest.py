"""Issue 29 on `dsv4ctl ingest` (hostile-modes S11, S29, S30): the same log twice is one run, files that are not
job logs are refused, and the log is copied so re-judging works after the original is gone. Real SQLite, real
files, the CLI in-process (`main`) and, where a hang is the bug, in a subprocess with a deadline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.cli import main
from dsv4ctl.store import open_store

from .conftest import FIXTURES, ROOT

LOGS = FIXTURES / "logs"


def run_main(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def perf_log(tmp_path: Path, name: str, gen_s: float) -> Path:
    path = tmp_path / f"{name}.log"
    path.write_text((LOGS / "J17.log").read_text(encoding="utf-8").replace('"gen_s": 21.7', f'"gen_s": {gen_s}'),
                    encoding="utf-8")
    return path


# ---- S11: the same log ingested twice ----------------------------------------------------------------------------


def test_the_same_log_twice_is_refused_naming_the_run_it_already_is(capsys, tmp_path):
    """S11: six ingests of one file made six runs, and compare said REJECT p = 0.0013 from one sample a side."""
    db = tmp_path / "r.db"
    a = perf_log(tmp_path, "a", 20.0)
    code, out, _ = run_main(capsys, "ingest", "--log", a, "--experiment", "dupA", "--label", "A1", "--db", db)
    assert code == 0 and "run 1 (A1)" in out
    copy = tmp_path / "elsewhere" / "renamed.log"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    for log, experiment in ((a, "dupA"), (copy, "dupA"), (copy, "another")):  # same bytes: any path, any experiment
        code, _, err = run_main(capsys, "ingest", "--log", log, "--experiment", experiment, "--db", db)
        assert code == 2 and "is already run 1 (A1, experiment 'dupA'" in err and "--again" in err, err
    assert len(open_store(db).runs()) == 1
    assert not [p for p in (tmp_path / "runs" / "ingested").iterdir() if p.is_dir()][1:]  # refused copies removed
    stored = open_store(db).find_run("A1")
    assert stored.content_sha256 and stored.source_path == str(a)


def test_again_records_it_says_it_doubles_the_statistics_and_compare_flags_the_copies(capsys, tmp_path):
    db = tmp_path / "r.db"
    a, b = perf_log(tmp_path, "a", 20.0), perf_log(tmp_path, "b", 21.0)
    for i in range(6):
        extra = ["--again"] if i else []
        assert run_main(capsys, "ingest", "--log", a, "--experiment", "dupA", "--db", db, *extra)[0] == 0
        code, _, err = run_main(capsys, "ingest", "--log", b, "--experiment", "dupB", "--db", db, *extra)
        assert code == 0 and (not i or "counts twice" in err), err
    code, out, _ = run_main(capsys, "compare", "dupA", "dupB", "--db", db, "--json")
    data = json.loads(out)
    flagged = [w for w in data["warnings"] if "ingested again" in w]
    assert len(flagged) == 2 and "6 runs are 1 distinct log(s)" in flagged[0], data["warnings"]
    # distinct logs are not flagged
    other = tmp_path / "other.db"
    for i, gen_s in enumerate((20.0, 20.1, 20.2)):
        run_main(capsys, "ingest", "--log", perf_log(tmp_path, f"c{i}", gen_s), "--experiment", "c", "--db", other)
        run_main(capsys, "ingest", "--log", perf_log(tmp_path, f"d{i}", gen_s + 1), "--experiment", "d", "--db", other)
    data = json.loads(run_main(capsys, "compare", "c", "d", "--db", other, "--json")[1])
    assert not [w for w in data["warnings"] if "ingested again" in w]


def test_the_content_hash_is_a_migration_of_an_existing_store(tmp_path):
    from dsv4ctl.store import MIGRATIONS

    store = open_store(tmp_path / "r.db")
    columns = {row[1] for row in store.db.execute("PRAGMA table_info(runs)")}
    assert {"content_sha256", "source_path", "sacct_path"} <= columns
    assert "m009_ingest" in [m.__name__ for m in MIGRATIONS]
    assert "idx_runs_content_sha256" in {i.name for i in store.db["runs"].indexes}


# ---- S29: what is not a job log -----------------------------------------------------------------------------------


def test_binary_empty_and_markerless_files_are_refused_without_force(capsys, tmp_path):
    """S29: 50 MB of random bytes, an ELF binary and an empty file were each recorded as an `incomplete` run."""
    db = tmp_path / "r.db"
    rand = tmp_path / "rand.bin"
    rand.write_bytes(os.urandom(256 * 1024))
    prose = tmp_path / "notes.txt"
    prose.write_text("meeting notes\nnothing a job prints\n", encoding="utf-8")
    cases = {rand: "does not look like a job log", Path(sys.executable).resolve(): "does not look like a job log",
             Path("/dev/null"): "is a device", prose: "has no line of a job log"}
    for path, why in cases.items():
        code, _, err = run_main(capsys, "ingest", "--log", path, "--experiment", "bin", "--db", db)
        assert code == 2 and why in err and "Traceback" not in err, (path, err)
    assert open_store(db).runs() == []
    code, out, _ = run_main(capsys, "ingest", "--log", prose, "--experiment", "bin", "--db", db, "--force")
    assert code == 0 and "(passed)" not in out  # forced in, judged like any log: never passed without results
    code, out, _ = run_main(capsys, "ingest", "--log", rand, "--experiment", "bin", "--db", db, "--force")
    assert code == 0 and "(passed)" not in out


def test_dev_zero_and_pipes_are_refused_at_once_not_read_forever(tmp_path):
    """S29/S30: /dev/zero never ended (100% CPU until killed); a pipe was stored as /proc/PID/fd/pipe:[...]."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((Path("/dev/zero"), "a device"), (fifo, "a pipe")):
        done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "ingest", "--log", str(path), "--experiment",
                               "fifo", "--db", str(tmp_path / "r.db")], capture_output=True, text=True,
                              timeout=60, cwd=ROOT)
        assert done.returncode == 2 and f"is {kind}, not a regular file" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_a_log_larger_than_the_cap_is_refused_without_reading_it(capsys, tmp_path):
    from dsv4ctl.campaign.ingest import MAX_LOG_BYTES

    huge = tmp_path / "huge.log"
    with open(huge, "wb") as f:  # sparse: the size is real, the bytes are never written
        f.truncate(MAX_LOG_BYTES + 1)
    code, _, err = run_main(capsys, "ingest", "--log", huge, "--experiment", "big", "--db", tmp_path / "r.db")
    assert code == 2 and "more than the 16384 MiB ingest reads" in err


# ---- S30: the log is kept ------------------------------------------------------------------------------------------


def test_the_log_and_its_sacct_are_copied_so_rejudging_works_after_the_original_is_gone(capsys, tmp_path):
    """S30: ingest kept only the path; after `rm gone.log`, `verdict GONE1` said "cannot read log" (exit 1) for a
    run stored as passed."""
    gone = tmp_path / "gone.log"
    sacct = tmp_path / "gone.sacct"
    shutil.copy(LOGS / "J17.log", gone)
    shutil.copy(LOGS / "J17.sacct", sacct)
    db = tmp_path / "r.db"
    code, out, _ = run_main(capsys, "ingest", "--log", gone, "--sacct", sacct, "--experiment", "gone", "--label",
                            "GONE1", "--db", db, "--json")
    first = json.loads(out)
    assert code == 0 and first["verdict"]["passed"]
    row = open_store(db).find_run("GONE1")
    assert Path(row.log_path).read_bytes() == (LOGS / "J17.log").read_bytes()
    assert Path(row.log_path).parent == tmp_path / "runs" / "ingested" / row.token == Path(row.run_dir)
    assert Path(row.sacct_path).read_bytes() == (LOGS / "J17.sacct").read_bytes()
    gone.unlink()
    sacct.unlink()
    code, out, _ = run_main(capsys, "verdict", "GONE1", "--db", db, "--json")
    again = json.loads(out)
    assert code == 0 and again["passed"] and again["reasons"] == first["verdict"]["reasons"]
    assert again["scheduler"] == first["verdict"]["scheduler"]


def test_the_copy_goes_where_the_runs_directory_is_configured(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DSV4CTL_RUNS_DIR", str(tmp_path / "elsewhere"))
    code, out, _ = run_main(capsys, "ingest", "--log", LOGS / "J08.log", "--experiment", "e", "--db",
                            tmp_path / "r.db", "--json")
    assert code == 0 and json.loads(out)["log_path"].startswith(str(tmp_path / "elsewhere" / "ingested"))


def test_an_unknown_switch_is_refused_as_validate_refuses_it(capsys, tmp_path):
    """issue 26 m18: `ingest --switch DSV4_NOPE=1` was recorded silently (validate refuses the same switch)."""
    db = tmp_path / "r.db"
    log = perf_log(tmp_path, "s", 20.0)
    code, _, err = run_main(capsys, "ingest", "--log", log, "--experiment", "sw", "--switch", "DSV4_NOPE=1", "--db", db)
    assert code == 2 and "--switch DSV4_NOPE: unknown switch" in err and "Traceback" not in err
    assert not db.exists() or open_store(db).runs() == []
    code, out, _ = run_main(capsys, "ingest", "--log", log, "--experiment", "sw", "--switch", "DSV4_MOE_ROUTING_Q1=1",
                            "--db", db)
    assert code == 0 and open_store(db).runs()[0].to_json()["switches"] == {"DSV4_MOE_ROUTING_Q1": "1"}
