"""Reliability: run directories never shared, waits scoped to their own runs, plans recorded whole and claimed once,
a store that is read-only, damaged, full or newer than this code, runs directories that cannot be written, odd
numbers and failing judges, a local wrapper killed under its job. Local backend and the fake replay payload."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsv4ctl.campaign.plan import submit
from dsv4ctl.judge.files import judge_files
from dsv4ctl.errors import Dsv4Error, LogError
from dsv4ctl.store import StoreError, open_store
from dsv4ctl.campaign.watch import poll_once, watch

from .conftest import FIXTURES, ROOT
from .test_slurm import spec_file

LOGS = FIXTURES / "logs"
IS_ROOT = os.geteuid() == 0


def dsv4ctl(*args, env: dict[str, str] | None = None, timeout: float = 120, as_user: bool = False):
    """The CLI in a subprocess; `as_user`: without root's power to write what file modes forbid."""
    argv = [sys.executable, "-m", "dsv4ctl.cli", *map(str, args)]
    if as_user and IS_ROOT:
        argv = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def one_line_error(done, *needles: str, code: int = 1) -> None:
    """Exit `code` (1), an `error:` line naming what went wrong, and no traceback."""
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    first = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert first, done.stderr
    for needle in needles:
        assert needle in first[0], first[0]


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "256k"):
    """A small filesystem of our own (root only): to fill up, or to remount read-only."""
    if not IS_ROOT:
        pytest.skip("needs root to mount a tmpfs")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> None:
    with contextlib.suppress(OSError), open(directory / "filler", "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


# ---- 1. run isolation --------------------------------------------------------------------------------------------


def test_ab_with_one_name_gives_every_run_its_own_directory(tmp_path):
    base = spec_file(tmp_path, "same", {"REPLAY_LOG": str(LOGS / "J17.log"), "REPLAY_GEN_S": "100"})
    cand = tmp_path / "cand.yaml"
    cand.write_text("extends: same.yaml\nenvironment:\n  env:\n    REPLAY_GEN_S: '50'\n", encoding="utf-8")
    db = tmp_path / "r.db"
    done = dsv4ctl("submit", "--ab", base, cand, "--repeats", "2", "--backend", "local", "--db", db,
                   "--runs-dir", tmp_path / "runs", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert len(runs) == 4 and len({r["run_dir"] for r in runs}) == 4
    for run in runs:
        run_dir = Path(run["run_dir"])
        assert str(run["id"]) in run_dir.name
        snapshot = json.loads((run_dir / "spec.json").read_text())
        expected = "100" if run["side"] == "baseline" else "50"
        assert snapshot["environment"]["env"]["REPLAY_GEN_S"] == expected
        assert abs(run["metrics"]["gen_s"] - float(expected)) <= float(expected) * 0.04
        assert (run_dir / "raw.log").read_text().count("PY_EXIT=") == 1


def test_two_runs_are_never_planned_into_one_directory(tmp_path, monkeypatch):
    from dsv4ctl.campaign import plan as campaign

    spec = spec_file(tmp_path, "twice", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=2)
    monkeypatch.setattr(campaign, "_run_dir_name", lambda run_id, repeat: "r0")
    store = open_store(tmp_path / "r.db")
    with pytest.raises(Dsv4Error, match="share the directory"):
        submit(store, [spec], "local", runs_root=tmp_path / "runs", campaign="c")
    assert store.runs() == []


def test_a_campaign_name_cannot_leave_the_runs_directory(tmp_path):
    spec = spec_file(tmp_path, "esc", {"REPLAY_LOG": str(LOGS / "J17.log")})
    done = dsv4ctl("submit", spec, "--backend", "local", "--db", tmp_path / "r.db", "--runs-dir",
                   tmp_path / "runs", "--campaign", "../x")
    # refused as a usage error (exit 2) by the option's check, before anything is recorded or written
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "Invalid value for '--campaign'" in done.stderr and "../x" in done.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "r.db").exists()


# ---- 2. the task a log belongs to --------------------------------------------------------------------------------

ARRAY_SACCT = """\
7_0|a|COMPLETED|0:0|00:00:10||2026-11-29T15:02:38|2026-11-29T15:02:48|vm
7_0.batch|batch|COMPLETED|0:0|00:00:10|1080K|2026-11-29T15:02:38|2026-11-29T15:02:48|vm
7_1|a|FAILED|1:0|00:00:10||2026-11-29T15:02:38|2026-11-29T15:02:48|vm
7_1.batch|batch|FAILED|1:0|00:00:10|1080K|2026-11-29T15:02:38|2026-11-29T15:02:48|vm
"""


def _array_case(tmp_path: Path, where: str, job_line: str | None) -> tuple[Path, Path]:
    sacct = tmp_path / "array.sacct"
    sacct.write_text(ARRAY_SACCT)
    log = tmp_path / where / "raw.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    text = (LOGS / "J17.log").read_text()
    log.write_text((job_line + "\n" if job_line else "") + text)
    return log, sacct


def test_verdict_of_an_array_task_judges_the_task_of_its_directory(tmp_path):
    log, sacct = _array_case(tmp_path, "task-1", None)
    verdict = judge_files(log, sacct)
    assert verdict.scheduler["job_id"] == "7_1" and not verdict.passed


def test_verdict_of_an_array_task_judges_the_task_its_log_names(tmp_path):
    log, sacct = _array_case(tmp_path, "x", "DSV4_JOB: spec=abc job=7_1 host=vm")
    verdict = judge_files(log, sacct)
    assert verdict.scheduler["job_id"] == "7_1" and not verdict.passed
    log, sacct = _array_case(tmp_path, "y", "DSV4_JOB: spec=abc job=9 array_job=7 array_task=1 host=vm")
    assert judge_files(log, sacct).scheduler["job_id"] == "7_1"


def test_verdict_of_an_array_refuses_to_guess_the_task(tmp_path, cli):
    log, sacct = _array_case(tmp_path, "plain", None)
    with pytest.raises(LogError, match="--job-id"):
        judge_files(log, sacct)
    assert judge_files(log, sacct, job_id="7_0").passed
    done = dsv4ctl("verdict", "--log", log, "--sacct", sacct)
    one_line_error(done, "--job-id")


# ---- 3. waits scoped to their own runs ---------------------------------------------------------------------------


def test_waits_follow_only_their_own_runs(tmp_path):
    db = tmp_path / "r.db"
    held = spec_file(tmp_path, "held", {"REPLAY_SLEEP": "600"})
    quick = spec_file(tmp_path, "quick", {"REPLAY_LOG": str(LOGS / "J17.log"), "REPLAY_SLEEP": "2"})
    other = dsv4ctl("submit", held, "--backend", "local", "--db", db, "--runs-dir", tmp_path / "runs",
                    "--campaign", "other")
    assert other.returncode == 0, other.stderr
    try:
        mine = dsv4ctl("submit", quick, "--backend", "local", "--db", db, "--runs-dir", tmp_path / "runs",
                       "--campaign", "mine", "--wait", timeout=60)
        assert mine.returncode == 0, mine.stderr
        again = dsv4ctl("status", "--campaign", "mine", "--watch", "--db", db, timeout=60)
        assert again.returncode == 0, again.stderr
        assert "waiting on 1 run(s): run 2 RUNNING" in mine.stderr  # progress (on stderr) names runs and states
        assert "quick" in mine.stdout
    finally:
        dsv4ctl("cancel", "--campaign", "other", "--db", db)


def test_progress_names_the_runs_and_paused_states():
    from dsv4ctl.store import RunRow
    from dsv4ctl.campaign.watch import waiting_on

    rows = [RunRow({"id": 3, "job_id": "11", "state": "RUNNING", "experiment": "a"}),
            RunRow({"id": 4, "job_id": "12", "state": "STOPPED", "experiment": "a"}),
            RunRow({"id": 5, "job_id": "13", "state": "REQUEUE_HOLD", "experiment": "b"})]
    line = waiting_on(rows, judged=set())
    assert "run 3 RUNNING" in line and "paused" in line and "run 4 STOPPED" in line and "run 5 REQUEUE_HOLD" in line


# ---- 5. plans recorded whole, runs claimed once ------------------------------------------------------------------


def test_a_run_is_claimed_once(tmp_path):
    s = open_store(tmp_path / "r.db")
    run_id = s.add_run(experiment_id=s.experiment_id("e", "h", "{}", "x"), backend="local", token="t0",
                       state="PLANNED", ingested=0)
    assert s.claim_runs([(run_id, "PLANNED", "t0", "t1")])
    assert not s.claim_runs([(run_id, "PLANNED", "t0", "t2")])
    assert s.find_run(str(run_id)).token == "t1" and s.find_run(str(run_id)).state == "SUBMITTING"


def _submit_cli(spec: Path, db: Path, runs: Path, name: str, env: dict[str, str] | None = None):
    return subprocess.Popen([sys.executable, "-m", "dsv4ctl.cli", "submit", str(spec), "--backend", "local",
                             "--db", str(db), "--runs-dir", str(runs), "--campaign", name], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_kill_9_during_planning_and_submission_then_two_resumes_give_one_job_per_run(tmp_path):
    spec = spec_file(tmp_path, "kill", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=3)
    db, runs = tmp_path / "r.db", tmp_path / "runs"
    open_store(db).close()
    started = time.monotonic()
    assert _submit_cli(spec, db, runs, "timing").wait(timeout=120) == 0
    whole = time.monotonic() - started  # how long one submit takes on this machine now
    rng = random.Random(20261129)
    campaigns = ["timing"]
    for i in range(10):  # kill -9 at random points from start-up through planning and submission
        proc = _submit_cli(spec, db, runs, f"k{i}")
        time.sleep(rng.uniform(0.3, 1.0) * whole)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        campaigns.append(f"k{i}")
    for n in (1, 2):  # and exactly between sbatch and the record, as the CLI dies there
        assert _submit_cli(spec, db, runs, f"crash{n}", {"DSV4CTL_FAULT": f"crash-after-submit:{n}"}).wait() == 70
        campaigns.append(f"crash{n}")
    store = open_store(db)
    recorded = {r.campaign for r in store.runs()}
    landed = {r.state for r in store.runs()} | ({"nothing recorded"} if len(recorded) < len(campaigns) else set())
    print("kills landed at:", sorted(landed))
    assert {"SUBMITTING", "PLANNED"} <= landed
    time.sleep(11)  # past the local backend's submit grace: a claim with no job behind it is free again
    for name in campaigns:
        resumes = [subprocess.Popen([sys.executable, "-m", "dsv4ctl.cli", "resume", name, "--db", str(db)],
                                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(2)]
        for proc in resumes:
            _, err = proc.communicate(timeout=120)
            assert "Traceback" not in err, err
    watch(store, interval_s=0.5, timeout_s=120)
    for name in campaigns:
        if name not in recorded:  # killed before its plan was committed: nothing of it may exist
            assert not any((runs / name).rglob("*.json")), name
            continue
        rows = store.runs(campaign=name)
        assert len(rows) == 3
        for row in rows:
            assert row.job_id, (name, row.state)
            out = Path(row.run_dir) / "slurm-local.out"
            assert out.read_text().count("PY_EXIT=") == 1, (name, row.id)
            assert store.verdict(row.id)["passed"]


# ---- 6. the store: read-only, damaged, immutable, full, newer, odd ids -------------------------------------------


def _store_with_a_run(db: Path) -> int:
    s = open_store(db)
    run_id = s.add_run(experiment_id=s.experiment_id("e", "h", "{}", "x"), backend="local", token="t",
                       state="PENDING", job_id="local-1", ingested=0, run_dir=str(db.parent))
    s.close()
    return run_id


@pytest.mark.parametrize("how", ["file", "directory"])
def test_a_read_only_database_can_still_be_read(tmp_path, how):
    d = tmp_path / "ro"
    d.mkdir()
    db = d / "r.db"
    run_id = _store_with_a_run(db)
    db.chmod(0o444)
    if how == "directory":
        d.chmod(0o555)
    try:
        for args in (("runs",), ("show", run_id), ("status",), ("status", "--json")):
            done = dsv4ctl(*args, "--db", db, as_user=True)
            assert done.returncode == 0, (args, done.stderr)
            assert "Traceback" not in done.stderr
        assert "read-only" in dsv4ctl("status", "--db", db, as_user=True).stderr
        one_line_error(dsv4ctl("ingest", "--log", LOGS / "J17.log", "--experiment", "e", "--db", db, as_user=True),
                       str(db))
    finally:
        d.chmod(0o755)


def test_an_immutable_database_is_read_and_refuses_writes(tmp_path):
    if not IS_ROOT:
        pytest.skip("chattr +i needs root")
    db = tmp_path / "r.db"
    _store_with_a_run(db)
    subprocess.run(["chattr", "+i", str(db)], check=True)
    try:
        assert dsv4ctl("runs", "--db", db).returncode == 0
        one_line_error(dsv4ctl("ingest", "--log", LOGS / "J17.log", "--experiment", "e", "--db", db), str(db))
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)


def test_a_damaged_database_is_a_one_line_error(tmp_path):
    db = tmp_path / "r.db"
    s = open_store(db)
    e = s.experiment_id("e", "h", "{}", "x")
    for i in range(300):
        s.add_run(experiment_id=e, backend="local", token=f"t{i}", state="PENDING", ingested=0,
                  run_dir="/x" * 40)
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    data = bytearray(db.read_bytes())
    page = 4096
    for offset in range(page * 3, min(len(data), page * 8)):
        data[offset] = 0x5A
    db.write_bytes(bytes(data))
    one_line_error(dsv4ctl("runs", "--db", db), str(db))


def test_a_full_disk_is_a_one_line_error(tmp_path):
    with tmpfs(tmp_path / "small", "512k") as small:
        db = small / "r.db"
        _store_with_a_run(db)
        s = open_store(db)
        fill(small)
        with pytest.raises(StoreError, match="disk holding it is full") as caught:
            for i in range(100):
                s.add_run(experiment_id=1, backend="local", token=f"x{i}", state="PLANNED", ingested=0,
                          run_dir="d" * 4000)
        assert str(db) in str(caught.value)
        done = dsv4ctl("ingest", "--log", LOGS / "J08.log", "--experiment", "e" * 2000, "--db", db)
        one_line_error(done, str(db))


def test_a_database_from_a_newer_dsv4ctl_is_refused(tmp_path):
    db = tmp_path / "r.db"
    _store_with_a_run(db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO _dsv4ctl_migrations (name, applied_at) VALUES ('m999_future', 'later')")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        open_store(db)
    one_line_error(dsv4ctl("runs", "--db", db), "newer")
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM _dsv4ctl_migrations WHERE name = 'm999_future'")
    conn.execute("PRAGMA user_version = 999")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        open_store(db)


def test_a_run_id_beyond_sqlite_integers_is_not_found(tmp_path):
    db = tmp_path / "r.db"
    _store_with_a_run(db)
    one_line_error(dsv4ctl("show", "99999999999999999999999", "--db", db), "no run", code=2)  # issue 26 M6


# ---- 7. odd numbers and failing judges ---------------------------------------------------------------------------


def test_a_400_digit_metric_is_stored_with_its_verdict(tmp_path):
    log = tmp_path / "big.log"
    big = "9" * 400
    log.write_text((LOGS / "J17.log").read_text().replace('"gen_s": 21.7', f'"gen_s": 21.7, "huge": {big}, '
                                                                         f'"nan": NaN'))
    assert big in log.read_text()
    db = tmp_path / "r.db"
    done = dsv4ctl("ingest", "--log", log, "--experiment", "big", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    s = open_store(db)
    run = s.runs()[0]
    assert s.verdict(run.id) is not None
    assert s.metrics(run.id)["gen_s"] == 21.7


def test_a_run_whose_judging_fails_does_not_stop_the_others(tmp_path, monkeypatch):
    from dsv4ctl.campaign import watch as watch_module

    specs = [spec_file(tmp_path, "good", {"REPLAY_LOG": str(LOGS / "J17.log")}),
             spec_file(tmp_path, "breaks", {"REPLAY_LOG": str(LOGS / "J17.log")})]
    store = open_store(tmp_path / "r.db")
    submit(store, specs, "local", runs_root=tmp_path / "runs", campaign="c")
    real = watch_module.parse_file

    def parse(path):
        if "/breaks/" in path:
            raise RuntimeError("the judge met something it cannot read")
        return real(path)

    monkeypatch.setattr(watch_module, "parse_file", parse)
    watch(store, interval_s=0.5, timeout_s=60)
    rows = {r.experiment: r for r in store.runs()}
    assert store.verdict(rows["good"].id)["passed"]
    assert store.verdict(rows["breaks"].id) is None
    assert "cannot read" in rows["breaks"].judge_error
    assert store.runs_in_flight() == []


# ---- 8. runs directory read-only or full -------------------------------------------------------------------------


def test_a_read_only_runs_directory_fails_planning_in_one_line(tmp_path):
    spec = spec_file(tmp_path, "ro", {"REPLAY_LOG": str(LOGS / "J17.log")})
    with tmpfs(tmp_path / "ro") as ro:
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        done = dsv4ctl("submit", spec, "--backend", "local", "--db", tmp_path / "r.db", "--runs-dir", ro / "runs")
        one_line_error(done, str(ro / "runs"))
    assert all(r.job_id is None for r in open_store(tmp_path / "r.db").runs())


def test_a_full_runs_directory_fails_cleanly_and_resume_completes_later(tmp_path):
    spec = spec_file(tmp_path, "full", {"REPLAY_LOG": str(LOGS / "J17.log")}, repeats=2)
    db = tmp_path / "r.db"
    with tmpfs(tmp_path / "full", "64k") as full:
        (full / "runs" / "c").mkdir(parents=True)
        fill(full)
        done = dsv4ctl("submit", spec, "--backend", "local", "--db", db, "--runs-dir", full / "runs",
                       "--campaign", "c")
        one_line_error(done, str(full / "runs"))
        store = open_store(db)
        assert [r.state for r in store.runs()] == ["PLANNED", "PLANNED"]
        one_line_error(dsv4ctl("resume", "c", "--db", db), str(full / "runs"))
        assert [r.state for r in store.runs()] == ["PLANNED", "PLANNED"]
        (full / "filler").unlink()
        resumed = dsv4ctl("resume", "c", "--db", db, "--wait")
        assert resumed.returncode == 0, resumed.stderr
        assert all(store.verdict(r.id)["passed"] for r in store.runs())


# ---- 9. a local wrapper killed under its job ---------------------------------------------------------------------


def test_a_killed_local_wrapper_keeps_following_its_job(tmp_path):
    spec = spec_file(tmp_path, "orphan", {"REPLAY_SLEEP": "4", "REPLAY_LOG": str(LOGS / "J17.log")})
    store = open_store(tmp_path / "r.db")
    outcome = submit(store, [spec], "local", runs_root=tmp_path / "runs")
    run = store.find_run(str(outcome.run_ids[0]))
    state_file = Path(run.run_dir) / "local-state.json"
    deadline = time.monotonic() + 20
    while not state_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(int(run.job_id.removeprefix("local-")), signal.SIGKILL)
    time.sleep(0.5)
    poll_once(store)
    assert store.find_run(str(run.id)).state == "RUNNING"
    watch(store, interval_s=0.5, timeout_s=60)
    done = store.find_run(str(run.id))
    assert (done.state, done.exit_code) == ("COMPLETED", 0), done.state_detail
    assert store.verdict(run.id)["passed"]
