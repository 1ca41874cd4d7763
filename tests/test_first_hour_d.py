"""The first hour, fourth batch (issue 26 m7, m8 and an interrupted submit): `cancel` says what the scheduler
says now (a second cancel of a job just cancelled is "already CANCELLED", not "asked to cancel" again), the first
`status` after a cancel has nothing in flight above CANCELLED rows, and a run left SUBMITTING by a Ctrl-C before
sbatch answered says how long it is looked for and what happens then (real SQLite; the live Slurm cluster)."""

from __future__ import annotations

import time

import pytest

from dsv4ctl import external
from dsv4ctl.store import open_store

from .test_first_hour_b import LOGS, run, submit_running
from .test_slurm import cluster  # noqa: F401 - the live cluster fixture


@pytest.mark.slurm
def test_cancel_twice_and_the_status_after_it(cluster, tmp_path):
    db = tmp_path / "r.db"
    row = submit_running(tmp_path, db, sleep_s=120)
    try:
        first = run("cancel", row.label, "--db", db)
        assert first.returncode == 0, first.stderr
        assert f"cancelled 1 job(s): {row.job_id} (CANCELLED" in first.stdout, first.stdout
        second = run("cancel", row.label, "--db", db)
        assert second.returncode == 0, second.stderr
        assert f"{row.label} is already CANCELLED" in second.stdout and "asked to" not in second.stdout, second.stdout
        status = run("status", "--campaign", "latest", "--db", db, columns=200)
        assert status.returncode == 0, status.stderr
        assert "1 run(s) of campaign" in status.stdout and "0 still in flight" in status.stdout, status.stdout
        assert "CANCELLED" in status.stdout
    finally:
        external.run(["scancel", row.job_id])


def test_a_run_left_submitting_says_how_long_it_is_looked_for(tmp_path):
    db = tmp_path / "r.db"
    assert run("ingest", "--log", LOGS / "J17.log", "--experiment", "x", "--db", db).returncode == 0
    store = open_store(db)
    experiment = store.db.execute("SELECT id FROM experiments").fetchone()[0]
    (tmp_path / "run").mkdir()
    store.add_run(experiment_id=experiment, token="tok-sub", state="SUBMITTING", backend="local", ingested=0,
                  label="MID1", run_dir=str(tmp_path / "run"), submitted_at=time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                                                                         time.gmtime()))
    shown = run("status", "--db", db, columns=200)
    assert shown.returncode == 0, shown.stderr
    said = " ".join(shown.stderr.split())
    assert "MID1) is SUBMITTING" in said and "looks for its job by the run's token for 00:00:" in said, said
    assert "then marks it SUBMIT_FAILED for `dsv4ctl resume`" in said
    time.sleep(11)  # past the local backend's 10 s grace: marked failed, and said no more
    later = run("status", "--db", db, columns=200)
    assert "is SUBMITTING" not in later.stderr, later.stderr
    assert open_store(db).find_run("MID1").state == "SUBMIT_FAILED"
