"""The local backend: the same rendered script, run by bash on this machine through `dsv4ctl.scheduler.localrun`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .localprocs import kill_job
from .localrun import process_start, py_exit_of, read_pid_file, read_state, write_pid_file
from .base import JobRef, JobStatus, SubmitError


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


def _is_wrapper_of(pid: int, run_dir: Path) -> bool:
    """pid is this run's wrapper still (`python -m dsv4ctl.scheduler.localrun RUN_DIR ...`), not a process that got its pid."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    named = {os.fsencode(str(run_dir)), os.fsencode(str(Path(run_dir).resolve()))}
    return b"dsv4ctl.scheduler.localrun" in argv and bool(named & set(argv))


def _wrapper_pid(job_id: str) -> int | None:
    return int(job_id.removeprefix("local-")) if job_id.startswith("local-") else None


def _final(job_id: str, state: dict) -> JobStatus:
    return JobStatus(job_id, state["state"], exit_code=state.get("exit_code"), signal=state.get("signal"),
                     elapsed_s=state.get("elapsed_s"), max_rss_kib=state.get("max_rss_kib"), node=state.get("node"),
                     started_at=state.get("started_at"), ended_at=state.get("ended_at"), source="local",
                     settled=True)


def _orphan(job: JobRef, state: dict | None) -> JobStatus:
    """The wrapper vanished (kill -9, OOM killer) before writing a final state. While the job's own process lives
    (same pid, same start time) it is followed; once gone, raw.log's PY_EXIT says how it ended."""
    node, started = (state or {}).get("node"), (state or {}).get("started_at")
    pid = (state or {}).get("job_pgid")
    if state and state.get("job_start") is not None and process_start(pid) == state["job_start"]:
        return JobStatus(job.job_id, "RUNNING", state_detail=f"local wrapper vanished; following its job (pid {pid})",
                         node=node, started_at=started, source="local")
    code = py_exit_of(job.run_dir) if state else None
    if code is None:
        return JobStatus(job.job_id, "NODE_FAIL", state_detail="local wrapper vanished", node=node,
                         started_at=started, source="local", settled=True)
    return JobStatus(job.job_id, "COMPLETED" if code == 0 else "FAILED", exit_code=code, signal=0, node=node,
                     started_at=started, state_detail="local wrapper vanished; exit code from raw.log's PY_EXIT",
                     source="local", settled=True)


class LocalScheduler:
    name = "local"
    submit_grace_s = 10.0  # the wrapper records its pid and token a fraction of a second after it starts

    def submit(self, script: Path, run_dir: Path, token: str, job_name: str,
               array_size: int | None = None) -> str:
        if array_size and array_size > 1:
            raise SubmitError("the local backend runs one job per submission (no arrays)", transient=False)
        try:
            with open(run_dir / "local-wrapper.log", "ab") as log:
                # Its own session: the job survives the CLI exiting, and a ^C in the terminal.
                proc = subprocess.Popen([sys.executable, "-m", "dsv4ctl.scheduler.localrun", str(run_dir), script.name, token],
                                        cwd=run_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
        except OSError as exc:
            raise SubmitError(f"cannot start the local job: {exc}", transient=False) from None
        write_pid_file(run_dir, proc.pid, token)  # the wrapper writes it too, first thing
        return f"local-{proc.pid}"

    def poll(self, jobs: list[JobRef]) -> tuple[dict[str, JobStatus], list[str]]:
        statuses = {}
        for job in jobs:
            wrapper = _wrapper_pid(job.job_id)
            state = read_state(job.run_dir)
            if state and state.get("wrapper_pid") not in (None, wrapper):
                state = None  # an earlier job's record in a resubmitted run's directory
            if state and state.get("state") == "PENDING" and _alive(wrapper):
                statuses[job.job_id] = JobStatus(job.job_id, "PENDING", state_detail=state.get("state_detail"),
                                                 node=state.get("node"), source="local")
            elif state and state.get("state") not in ("RUNNING", "PENDING"):
                statuses[job.job_id] = _final(job.job_id, state)
            elif _alive(wrapper):
                statuses[job.job_id] = JobStatus(job.job_id, "RUNNING" if state else "PENDING",
                                                 node=(state or {}).get("node"), source="local",
                                                 started_at=(state or {}).get("started_at"))
            else:
                statuses[job.job_id] = _orphan(job, state)
        return statuses, []

    def cancel(self, jobs: list[JobRef]) -> list[str]:
        """SIGTERM to a live wrapper (it ends the whole job); for a job whose wrapper is gone (finished, or killed),
        whatever of the job still runs is killed here (an orphaned engine), and nothing is a problem."""
        problems = []
        for job in jobs:
            wrapper = _wrapper_pid(job.job_id)
            if wrapper is None:
                problems.append(f"{job.job_id}: not a local job id")
                continue
            state = read_state(job.run_dir) or {}
            if state.get("wrapper_pid") not in (None, wrapper):
                state = {}
            if _alive(wrapper) and _is_wrapper_of(wrapper, job.run_dir):
                try:
                    os.kill(wrapper, signal.SIGTERM)
                    continue
                except ProcessLookupError:
                    pass
            group = state.get("job_pgid") if state.get("job_start") is not None and \
                process_start(state.get("job_pgid")) == state.get("job_start") else None
            kill_job(group, state.get("job_marker"))
        return problems

    def find_token(self, token: str, job_name: str, run_dir: Path) -> str | None:
        """The job a killed CLI started: the wrapper wrote its pid beside the run's token."""
        found = read_pid_file(run_dir)
        return f"local-{found[0]}" if found and found[1] == token else None
