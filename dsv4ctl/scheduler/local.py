"""The local backend: the same rendered script, run by bash on this machine through `dsv4ctl.localrun`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..localrun import read_state
from . import JobRef, JobStatus, SubmitError


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own child, not yet reaped) is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class LocalScheduler:
    name = "local"

    def submit(self, script: Path, run_dir: Path, token: str, job_name: str,
               array_size: int | None = None) -> str:
        if array_size and array_size > 1:
            raise SubmitError("the local backend runs one job per submission (no arrays)", transient=False)
        try:
            with open(run_dir / "local-wrapper.log", "ab") as log:
                # Its own session: the job survives the CLI exiting, and a ^C in the terminal.
                proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl.localrun", str(run_dir), script.name],
                                        cwd=run_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
        except OSError as exc:
            raise SubmitError(f"cannot start the local job: {exc}", transient=False) from None
        (run_dir / "local-wrapper.pid").write_text(str(proc.pid))
        return f"local-{proc.pid}"

    def poll(self, jobs: list[JobRef]) -> tuple[dict[str, JobStatus], list[str]]:
        statuses = {}
        for job in jobs:
            wrapper = int(job.job_id.removeprefix("local-")) if job.job_id.startswith("local-") else None
            state = read_state(job.run_dir)
            if state and state.get("state") != "RUNNING":
                statuses[job.job_id] = JobStatus(
                    job.job_id, state["state"], exit_code=state.get("exit_code"), signal=state.get("signal"),
                    elapsed_s=state.get("elapsed_s"), max_rss_kib=state.get("max_rss_kib"), node=state.get("node"),
                    started_at=state.get("started_at"), ended_at=state.get("ended_at"), source="local",
                    settled=True)
            elif _alive(wrapper):
                statuses[job.job_id] = JobStatus(job.job_id, "RUNNING" if state else "PENDING",
                                                 node=(state or {}).get("node"), source="local",
                                                 started_at=(state or {}).get("started_at"))
            else:
                # The wrapper died without writing a final state (machine reboot, kill -9): the job's fate is unknown.
                statuses[job.job_id] = JobStatus(job.job_id, "NODE_FAIL", state_detail="local wrapper vanished",
                                                 source="local", settled=True)
        return statuses, []

    def cancel(self, jobs: list[JobRef]) -> list[str]:
        problems = []
        for job in jobs:
            try:
                os.kill(int(job.job_id.removeprefix("local-")), signal.SIGTERM)
            except (ValueError, ProcessLookupError) as exc:
                problems.append(f"{job.job_id}: {exc}")
        return problems

    def find_token(self, token: str, job_name: str) -> str | None:
        return None  # local submissions are recorded before the job starts (see campaign.submit_run)
