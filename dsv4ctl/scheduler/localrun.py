"""The local backend's job wrapper: `python -m dsv4ctl.scheduler.localrun RUN_DIR SCRIPT [TOKEN]`.

Waits for the job's CPUs from the pool local jobs share (PENDING meanwhile; localprocs.py), then runs the rendered
script with bash in its own process group, in its own session (it outlives the CLI), every process of it marked
(localprocs.JOB_ENV): a cancel, a timeout, and the job's own end kill all of them, an orphaned engine included. Keeps
`local-state.json` in the run directory the way Slurm keeps its accounting: state, exit code and signal, start, end,
elapsed seconds, peak RSS, and the job's pid with its start time (so a poller can tell, when this wrapper is gone,
whether the job still runs). `local-wrapper.pid` holds the wrapper's pid and the run's token: a CLI killed right
after starting the wrapper finds its job again by it. Enforces `slurm.time` from spec.json (TIMEOUT); SIGTERM
cancels (CANCELLED). Stdlib only.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .localprocs import CPUS_ENV, JOB_ENV, CpuSlots, job_marker, kill_job
from ..units import slurm_time_s

STATE_FILE = "local-state.json"
PID_FILE = "local-wrapper.pid"
RAW_LOG = "raw.log"
_PY_EXIT = re.compile(rb"^PY_EXIT=(-?[0-9]+)\s*$", re.M)


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # readers never see half a file


def write_state(run_dir: Path, **state: object) -> None:
    _write_whole(run_dir / STATE_FILE, json.dumps(state, sort_keys=True))


def write_pid_file(run_dir: Path, pid: int, token: str | None) -> None:
    _write_whole(run_dir / PID_FILE, f"{pid} {token or ''}".strip())


def read_pid_file(run_dir: Path) -> tuple[int, str | None] | None:
    """(wrapper pid, token) of the last job started in this directory."""
    try:
        pid, _, token = (run_dir / PID_FILE).read_text().strip().partition(" ")
        return int(pid), token or None
    except (OSError, ValueError):
        return None


def process_start(pid: int | None) -> int | None:
    """A live process's start time (clock ticks since boot, /proc/PID/stat field 22); None if gone or a zombie.
    A pid with the same start time is the same process, not a recycled pid."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def py_exit_of(run_dir: Path) -> int | None:
    """The last `PY_EXIT=<code>` of raw.log (the job script always ends with one), or None."""
    try:
        with open(run_dir / RAW_LOG, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            codes = _PY_EXIT.findall(f.read())
    except OSError:
        return None
    return int(codes[-1]) if codes else None


def read_state(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def time_limit_s(run_dir: Path) -> float | None:
    """`slurm.time` of the spec snapshot in seconds (Slurm forms: M, M:S, H:M:S, D-H[:M[:S]])."""
    try:
        text = json.loads((run_dir / "spec.json").read_text())["slurm"]["time"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return slurm_time_s(text)


class _Cancelled(Exception):
    """SIGTERM while the job waited for its CPUs: it never started."""


def _cpus_wanted(run_dir: Path) -> int | None:
    """slurm.cpus_per_task of the snapshot; None when the spec does not say (the job is not counted)."""
    try:
        cpus = json.loads((run_dir / "spec.json").read_text())["slurm"].get("cpus_per_task")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 else None


def _wait_for_cpus(run_dir: Path, base: dict) -> CpuSlots:
    """The job's CPUs from the local pool (PENDING while it waits); _Cancelled on SIGTERM meanwhile."""
    def on_term(signum: int, frame: object) -> None:
        raise _Cancelled

    signal.signal(signal.SIGTERM, on_term)
    wanted = _cpus_wanted(run_dir)
    slots = CpuSlots(wanted or 0)
    if wanted is None:
        return slots
    slots.acquire(on_wait=lambda: write_state(
        run_dir, state="PENDING", state_detail=f"local: waiting for {slots.wanted} of the {slots.pool} CPUs local "
        f"jobs share ({CPUS_ENV})", **base))
    return slots


def main(run_dir: Path, script: str, token: str | None = None) -> int:
    write_pid_file(run_dir, os.getpid(), token)
    base = {"wrapper_pid": os.getpid(), "node": socket.gethostname()}
    try:
        slots = _wait_for_cpus(run_dir, base)
    except _Cancelled:
        write_state(run_dir, state="CANCELLED", exit_code=0, signal=int(signal.SIGTERM), ended_at=_stamp(time.time()),
                    elapsed_s=0, state_detail="cancelled while waiting for CPUs", **base)
        return 0
    start = time.time()
    limit = time_limit_s(run_dir)
    base["started_at"] = _stamp(start)
    marker = job_marker(run_dir, os.getpid())
    stopped_by: list[str] = []
    started: list[subprocess.Popen] = []

    def on_term(signum: int, frame: object) -> None:
        stopped_by.append("CANCELLED")
        kill_job(started[0].pid if started else None, marker)

    signal.signal(signal.SIGTERM, on_term)
    with open(run_dir / "slurm-local.out", "ab") as out:
        child = subprocess.Popen(["bash", script], cwd=run_dir, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, JOB_ENV: marker})
    started.append(child)
    if stopped_by:  # cancelled while it was being started
        kill_job(child.pid, marker)
    base["job_start"] = process_start(child.pid)
    write_state(run_dir, state="RUNNING", job_pgid=child.pid, job_marker=marker, **base)
    try:
        rc = child.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        stopped_by.append("TIMEOUT")
        kill_job(child.pid, marker)
        rc = child.wait()
    # What the job left behind (an engine re-parented to init when its server died): ended, as Slurm's cgroup does.
    leftovers = kill_job(None, marker)
    end = time.time()
    slots.release()
    exit_code, sig = (0, -rc) if rc < 0 else (rc, 0)
    if stopped_by:
        state = stopped_by[0]
        exit_code, sig = 0, signal.SIGTERM  # as Slurm reports a killed job: 0:15
    else:
        state = "COMPLETED" if rc == 0 else "FAILED"
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    write_state(run_dir, state=state, job_pgid=child.pid, job_marker=marker, exit_code=exit_code, signal=int(sig),
                ended_at=_stamp(end), elapsed_s=int(round(end - start)), max_rss_kib=peak_kib,
                leftovers_killed=leftovers, **base)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
