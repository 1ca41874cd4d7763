"""The local backend (the embedded default without sbatch): same script, real processes, Slurm-like states."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dsv4ctl.campaign.plan import submit
from dsv4ctl.scheduler.localprocs import job_processes
from dsv4ctl.scheduler.localrun import process_start, time_limit_s
from dsv4ctl.store import open_store
from dsv4ctl.campaign.watch import watch

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


# ---- issue 29 S7, S28: a local job dies whole; local jobs share the machine's CPUs ---------------------------------

LEFTOVER = '''import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"], start_new_session=True)  # leaves the job's group, as an orphaned engine
open("leftover.pid", "w").write(str(child.pid))
print("ENGINE_READY in 0.1s", flush=True)
time.sleep(float(os.environ.get("HOLD_S", "0")))
'''


def leftover_runtime(tmp_path) -> Path:
    runtime = tmp_path / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "dsv4_probe.py").write_text(LEFTOVER, encoding="utf-8")
    return runtime


def leftover_spec(tmp_path, name: str, hold_s: int) -> Path:
    spec = spec_file(tmp_path, name, {"HOLD_S": str(hold_s)})
    spec.write_text(spec.read_text().replace(str(FIXTURES / "runtime"), str(leftover_runtime(tmp_path / name))))
    return spec


def alive(pid: int) -> bool:
    return process_start(pid) is not None


def wait_file(path, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return int(path.read_text())


def test_what_a_finished_job_leaves_behind_is_killed(tmp_path):
    # S7: the job ended (here on its own) while a process it started lived on outside its process group
    store = open_store(tmp_path / "r.db")
    submit(store, [leftover_spec(tmp_path, "leaves", 0)], "local", runs_root=tmp_path / "runs")
    run = store.runs()[0]
    child = wait_file(Path(run.run_dir) / "leftover.pid")
    watch(store, interval_s=0.5, timeout_s=60)
    state = json.loads((Path(run.run_dir) / "local-state.json").read_text())
    assert state["leftovers_killed"] == 1 and not alive(child)
    assert job_processes(state["job_marker"]) == []


def test_cancel_of_a_run_whose_wrapper_is_gone_kills_its_leftovers(tmp_path):
    # S7: `cancel` said "[Errno 3] No such process" (exit 1) and left the engine running
    store = open_store(tmp_path / "r.db")
    submit(store, [leftover_spec(tmp_path, "holds", 300)], "local", runs_root=tmp_path / "runs")
    run = store.runs()[0]
    child = wait_file(Path(run.run_dir) / "leftover.pid")
    wrapper = int(run.job_id.removeprefix("local-"))
    os.kill(wrapper, signal.SIGKILL)  # the wrapper gone (OOM killer, kill -9): nothing of it cleans up
    state = json.loads((Path(run.run_dir) / "local-state.json").read_text())
    assert len(job_processes(state["job_marker"])) >= 3  # bash, the probe, its detached child
    done = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "cancel", run.job_id, "--db", str(tmp_path / "r.db")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "No such process" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert job_processes(state["job_marker"]) == [] and not alive(child)
    again = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "cancel", run.job_id, "--db", str(tmp_path / "r.db")],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # nothing left: nothing to complain about


def test_local_jobs_take_cpus_from_one_pool(tmp_path, monkeypatch):
    # S28: a bisection ran 10 local jobs at once on 2 cores. A pool of 2 CPUs, jobs of 2 CPUs: one at a time
    monkeypatch.setenv("DSV4CTL_LOCAL_CPUS", "2")
    monkeypatch.setenv("DSV4CTL_LOCAL_SLOTS_DIR", str(tmp_path / "slots"))
    specs = [spec_file(tmp_path, f"two-cpus-{i}", {"REPLAY_SLEEP": "2", "REPLAY_LOG": str(LOGS / "J17.log")},
                       slurm="cpus_per_task: 2") for i in range(3)]
    store = open_store(tmp_path / "r.db")
    submit(store, specs, "local", runs_root=tmp_path / "runs")
    time.sleep(1.0)
    from dsv4ctl.scheduler.local import LocalScheduler
    from dsv4ctl.scheduler import JobRef

    seen, _ = LocalScheduler().poll([JobRef(r.job_id, Path(r.run_dir)) for r in store.runs()])
    assert sorted(s.state for s in seen.values()) == ["PENDING", "PENDING", "RUNNING"]
    assert any("waiting for 2 of the 2 CPUs" in (s.state_detail or "") for s in seen.values())
    watch(store, interval_s=0.5, timeout_s=120)
    spans = []
    for run in store.runs():
        state = json.loads((Path(run.run_dir) / "local-state.json").read_text())
        assert run.state == "COMPLETED" and store.verdict(run.id)["passed"]
        spans.append((state["started_at"], state["ended_at"]))
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), spans  # never two at once
