"""The local backend (the embedded default without sbatch): same script, real processes, Slurm-like states."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from dsv4ctl.campaign import submit
from dsv4ctl.localrun import time_limit_s
from dsv4ctl.store import open_store
from dsv4ctl.watch import watch

from .conftest import FIXTURES
from .test_slurm import spec_file

LOGS = FIXTURES / "logs"


def test_completed_failed_and_timeout(tmp_path):
    specs = [spec_file(tmp_path, "ok", {"REPLAY_LOG": str(LOGS / "J17.log")}),
             spec_file(tmp_path, "bad", {"REPLAY_LOG": str(LOGS / "J11.log"), "REPLAY_EXIT": "2"}),
             spec_file(tmp_path, "slow", {"REPLAY_SLEEP": "60"}, slurm='time: "0:2"')]
    store = open_store(tmp_path / "r.db")
    outcome = submit(store, specs, "local", runs_root=tmp_path / "runs")
    watch(store, interval_s=0.5, timeout_s=60)
    rows = {r.experiment: r for r in store.runs()}
    assert len(outcome.run_ids) == 3
    assert (rows["ok"].state, rows["ok"].exit_code) == ("COMPLETED", 0)
    assert store.verdict(rows["ok"].id)["passed"]
    assert (rows["bad"].state, rows["bad"].exit_code) == ("FAILED", 2)
    assert store.verdict(rows["bad"].id)["status"] == "degenerate"
    assert rows["slow"].state == "TIMEOUT" and store.verdict(rows["slow"].id)["status"] == "incomplete"
    assert rows["ok"].max_rss_kib and rows["ok"].max_rss_kib > 1000 and rows["ok"].node


def test_job_survives_the_cli_and_cancel_stops_it(tmp_path):
    spec = spec_file(tmp_path, "sleeper", {"REPLAY_SLEEP": "3", "REPLAY_LOG": str(LOGS / "J17.log")})
    db = str(tmp_path / "r.db")
    env = {**os.environ}
    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "submit", str(spec), "--backend", "local", "--db", db,
                           "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr  # the CLI is gone; the job goes on
    store = open_store(db)
    watch(store, interval_s=0.5, timeout_s=30)
    run = store.runs()[0]
    assert run.state == "COMPLETED" and store.verdict(run.id)["passed"]

    long = spec_file(tmp_path, "long", {"REPLAY_SLEEP": "120"})
    submit(store, [long], "local", runs_root=tmp_path / "runs2")
    time.sleep(1)
    cancel = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "cancel", store.runs()[-1].job_id, "--db", db],
                            capture_output=True, text=True)
    assert cancel.returncode == 0, cancel.stderr
    watch(store, interval_s=0.5, timeout_s=30)
    cancelled = store.runs()[-1]
    assert (cancelled.state, cancelled.signal) == ("CANCELLED", 15)


def test_time_limit_forms(tmp_path):
    for text, seconds in (("2", 120), ("0:30", 30), ("01:00:00", 3600), ("1-00:00", 86400)):
        (tmp_path / "spec.json").write_text('{"slurm": {"time": "%s"}}' % text)
        assert time_limit_s(tmp_path) == seconds
