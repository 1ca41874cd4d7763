"""The processes of a local job, and the CPUs local jobs share (issue 29 S7, S28). Stdlib only, Linux /proc.

Every process of a local job carries JOB_ENV=<marker> in its environment (set by the wrapper, inherited by bash, the
probe, `vllm serve` and its EngineCore), so the job's processes are found even when one left its process group or
was re-parented to init (a killed API server's EngineCore: 1.7 GB, 20-33% CPU, left running after its run was
recorded FAILED). `kill_job` ends all of them: SIGTERM, then SIGKILL after a grace.

Local jobs that say slurm.cpus_per_task take that many CPUs (at most the pool) from one pool per user and machine,
as Slurm allocates a node's CPUs, and wait (PENDING) until they have them. The pool is this machine's CPUs
(DSV4CTL_LOCAL_CPUS overrides it; DSV4CTL_LOCAL_SLOTS_DIR moves it). On a 2-core machine that is one engine job at
a time (every engine spec here asks for cpus_per_task 2) or two 1-CPU jobs; ten engines at once on 2 cores made
contention failures that steered a bisection. A job that does not say is not counted (nothing to size it by).
A CPU is an flock'ed file: a wrapper that dies gives its CPUs back with it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

JOB_ENV = "DSV4CTL_LOCAL_JOB"
CPUS_ENV = "DSV4CTL_LOCAL_CPUS"
SLOTS_DIR_ENV = "DSV4CTL_LOCAL_SLOTS_DIR"
KILL_WAIT_S = 5.0
RETRY_S = 0.5


def job_marker(run_dir: Path, wrapper_pid: int) -> str:
    return f"{run_dir}@{wrapper_pid}"


def job_processes(marker: str) -> list[int]:
    """Live processes (ours to read) whose environment has JOB_ENV=marker, this process left out."""
    wanted = b"\0" + f"{JOB_ENV}={marker}".encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if wanted in b"\0" + f.read() + b"\0" and not _zombie(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _signal_all(pgid: int | None, pids: list[int], sig: int) -> None:
    if pgid:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _group_alive(pgid: int | None) -> bool:
    if not pgid:
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_job(pgid: int | None, marker: str | None, wait_s: float = KILL_WAIT_S) -> int:
    """SIGTERM to the job's process group and every process carrying its marker, SIGKILL to what is left after
    wait_s; returns how many processes there were."""
    pids = job_processes(marker) if marker else []
    if not pids and not _group_alive(pgid):
        return 0
    _signal_all(pgid, pids, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = job_processes(marker) if marker else []
        if not left and not _group_alive(pgid):
            return len(pids)
        time.sleep(0.1)
    _signal_all(pgid, job_processes(marker) if marker else [], signal.SIGKILL)
    return len(pids)


# ---- the CPU pool -------------------------------------------------------------------------------------------------


def pool_size() -> int:
    try:
        size = int(os.environ.get(CPUS_ENV, "0"))
    except ValueError:
        size = 0
    if size > 0:
        return size
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _slots_dir() -> Path:
    path = Path(os.environ.get(SLOTS_DIR_ENV) or f"/tmp/dsv4ctl-local-cpus-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


class CpuSlots:
    """`wanted` CPUs of the pool, held until release() (or the process's end)."""

    def __init__(self, wanted: int) -> None:
        self.pool = pool_size()
        self.wanted = max(0, min(wanted, self.pool))
        self.held: list[int] = []

    def acquire(self, on_wait=None) -> None:
        """Blocks until the CPUs are held. Arrivals queue on one lock, so a 2-CPU job is not starved by 1-CPU jobs
        that keep taking the CPUs it waits for; on_wait() is called once if it has to wait."""
        if not self.wanted:
            return
        directory = _slots_dir()
        queue = os.open(directory / "queue.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(queue, fcntl.LOCK_EX)
            waited = False
            while not self._try(directory):
                if not waited and on_wait is not None:
                    on_wait()
                waited = True
                time.sleep(RETRY_S)
        finally:
            os.close(queue)  # closing releases the queue lock; the CPUs stay held

    def _try(self, directory: Path) -> bool:
        for i in range(self.pool):
            fd = os.open(directory / f"cpu{i}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.held.append(fd)
            if len(self.held) == self.wanted:
                return True
        self.release()
        return False

    def release(self) -> None:
        for fd in self.held:
            os.close(fd)
        self.held = []
