"""What every backend implements and returns: the Scheduler protocol, a job's reference and status, and the one
error of a refused submission. Backends (slurm.py, local.py) import this, never the package that registers them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import Dsv4Error
from ..judge.states import FINAL as FINAL_STATES


class SubmitError(Dsv4Error):
    """The scheduler refused a job, or could not be reached."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class JobRef:
    job_id: str
    run_dir: Path


@dataclass
class JobStatus:
    job_id: str
    state: str  # a Slurm state word (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...) or UNKNOWN
    state_detail: str | None = None  # "by 0", a pending reason
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: int | None = None
    max_rss_kib: int | None = None
    node: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    source: str = ""  # sacct, squeue, scontrol, local
    settled: bool = False  # final, and the step rows are final too: safe to judge
    sacct_text: str | None = None  # the job's own rows, for the verdict

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


class Scheduler(Protocol):
    name: str
    # How long a CLI may take between claiming a run and recording its job: a SUBMITTING run older than this with
    # no job carrying its token was abandoned, and `resume` may take it again.
    submit_grace_s: float

    def submit(self, script: Path, run_dir: Path, token: str, job_name: str,
               array_size: int | None = None) -> str: ...

    def poll(self, jobs: list[JobRef]) -> tuple[dict[str, JobStatus], list[str]]: ...

    def cancel(self, jobs: list[JobRef]) -> list[str]: ...

    def find_token(self, token: str, job_name: str, run_dir: Path) -> str | None: ...
