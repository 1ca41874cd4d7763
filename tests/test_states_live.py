"""Paused and requeued jobs on a live Slurm: a job stopped, suspended, held or requeued-held is followed through
each state (never judged while paused, never dropped) and judged once it has finished."""

from __future__ import annotations

import time

import pytest

from dsv4ctl import external
from dsv4ctl.campaign.plan import submit
from dsv4ctl.judge.states import FINAL
from dsv4ctl.store import open_store
from dsv4ctl.campaign.watch import poll_once, waiting_on, watch

from .conftest import FIXTURES
from .test_slurm import cluster, spec_file  # noqa: F401 - the live cluster fixture

pytestmark = pytest.mark.slurm
LOGS = FIXTURES / "logs"


@pytest.fixture
def followed():
    """Runs made with `follow(...)`, cancelled at the end whatever happened."""
    runs: list[Followed] = []

    def follow(*args, **kwargs) -> "Followed":
        runs.append(Followed(*args, **kwargs))
        return runs[-1]

    yield follow
    for run in runs:
        if run.row().state not in FINAL:
            run.cancel()


class Followed:
    """One run submitted to the cluster and polled the way `status --watch` polls it, every state kept."""

    def __init__(self, tmp_path, name: str, sleep_s: int, extra_slurm: str = "") -> None:
        spec = spec_file(tmp_path, name, {"REPLAY_SLEEP": str(sleep_s), "REPLAY_LOG": str(LOGS / "J17.log")},
                         slurm='gres: "dcu:1"' + extra_slurm)
        self.store = open_store(tmp_path / "r.db")
        self.run_id = submit(self.store, [spec], "slurm", runs_root=tmp_path / "runs").run_ids[0]
        self.job_id = self.row().job_id
        self.seen: list[str] = []
        self.progress: list[str] = []

    def cancel(self) -> None:
        """A failed test must not leave a stopped or held job holding the node for the next tests."""
        external.run(["scancel", "--full", "--signal=CONT", self.job_id])
        external.run(["scancel", self.job_id])

    def row(self):
        return self.store.find_run(str(self.run_id))

    def poll(self) -> str:
        report = poll_once(self.store, [self.run_id])
        self.progress.append(waiting_on(report.waiting, set()))
        state = self.row().state
        if not self.seen or self.seen[-1] != state:
            self.seen.append(state)
        return state

    def until(self, wanted: set[str], timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.poll()
            if state in wanted:
                return state
            assert state not in FINAL, f"ended as {state} while waiting for {wanted}: {self.seen}"
            time.sleep(1)
        raise AssertionError(f"never reached {wanted}: {self.seen}")

    def hold_for(self, seconds: float) -> None:
        """Poll while paused: the run stays followed and unjudged."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.poll() not in FINAL, self.seen
            assert self.store.verdict(self.run_id) is None
            time.sleep(1)

    def judged_at_the_end(self) -> dict:
        watch(self.store, [self.run_id], interval_s=1, max_interval_s=3, timeout_s=120)
        verdict = self.store.verdict(self.run_id)
        assert verdict is not None, self.seen
        return verdict


def slurm(*argv: str) -> None:
    result = external.run(list(argv))
    assert result.ok, result.message


def test_stopped_then_continued(cluster, followed, tmp_path):  # noqa: F811
    run = followed(tmp_path, "stop-cont", 12)
    run.until({"RUNNING"})
    slurm("scancel", "--full", "--signal=STOP", run.job_id)  # --full: the batch script too, not only steps
    run.until({"STOPPED"}, 20)
    run.hold_for(3)
    assert any("paused" in line and "STOPPED" in line for line in run.progress)
    slurm("scancel", "--full", "--signal=CONT", run.job_id)
    run.until({"RUNNING", "COMPLETED"}, 20)
    assert run.judged_at_the_end()["passed"], run.seen
    assert "STOPPED" in run.seen and run.row().state == "COMPLETED"


def test_suspended_then_resumed(cluster, followed, tmp_path):  # noqa: F811
    run = followed(tmp_path, "suspend", 8)
    run.until({"RUNNING"})
    slurm("scontrol", "suspend", run.job_id)
    run.until({"SUSPENDED"}, 20)
    run.hold_for(3)
    assert any("paused" in line and "SUSPENDED" in line for line in run.progress)
    slurm("scontrol", "resume", run.job_id)
    assert run.judged_at_the_end()["passed"], run.seen
    assert "SUSPENDED" in run.seen and run.row().state == "COMPLETED"


def test_held_then_released(cluster, followed, tmp_path):  # noqa: F811
    run = followed(tmp_path, "hold", 3, extra_slurm=", extra: {begin: now+600}")
    run.until({"PENDING"})
    slurm("scontrol", "hold", run.job_id)
    run.hold_for(3)
    assert any("paused" in line and "JobHeld" in line for line in run.progress), run.progress  # User or Admin (root)
    slurm("scontrol", "release", run.job_id)
    slurm("scontrol", "update", f"JobId={run.job_id}", "StartTime=now")
    assert run.judged_at_the_end()["passed"], run.seen
    assert run.seen[0] == "PENDING" and run.row().state == "COMPLETED"


def test_requeued_held_then_released(cluster, followed, tmp_path):  # noqa: F811
    run = followed(tmp_path, "requeue-hold", 8)
    run.until({"RUNNING"})
    slurm("scontrol", "requeuehold", run.job_id)
    run.until({"PENDING", "REQUEUE_HOLD"}, 30)
    run.hold_for(3)
    assert any("paused" in line and "requeued in held state" in line for line in run.progress), run.progress
    slurm("scontrol", "release", run.job_id)
    slurm("scontrol", "update", f"JobId={run.job_id}", "StartTime=now")  # a requeued job waits ~2 min otherwise
    assert run.judged_at_the_end()["passed"], run.seen
    # Running, then back in the queue; what it passed through after the release (RUNNING, or straight to the end
    # between two polls on a loaded machine) is the watch's, not seen here.
    assert "RUNNING" in run.seen, run.seen
    requeued = run.seen[run.seen.index("RUNNING") + 1:]
    assert {"PENDING", "REQUEUE_HOLD"} & set(requeued), run.seen
    assert run.row().state == "COMPLETED"
