"""What a run in flight is doing, read from its stored row and its log alone (no scheduler call): how long it has
waited or run, its last `### STAGE:`, whether it is paused, and whether its pending reason can ever clear. Used by
the watch, `status`, `runs` and the live table."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from ..judge.states import PAUSED, normalise
from ..store import RunRow


def _age_s(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    then = datetime.fromisoformat(stamp)
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - then).total_seconds()


HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state")  # squeue's reasons for a held job


# Pending reasons that never clear by themselves (Slurm's job_reason_codes page): the request exceeds what the
# partition, association or QOS allows per job, or names something the job may not use. Someone has to change the
# job (cancel and resubmit) or the cluster; waiting longer changes nothing.
STUCK_REASONS = frozenset({"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown",
                           "PartitionInactive", "AccountNotAllowed", "QOSNotAllowed", "InvalidAccount", "InvalidQOS",
                           "BadConstraints", "DependencyNeverSatisfied", "JobLaunchFailure"})
STUCK_PREFIXES = ("AssocMax", "QOSMax")  # AssocMax*, QOSMax*: a part of the request exceeds a per-job maximum
STUCK_PATTERN = re.compile(r"^Max\w*PerAccount$")  # Max*PerAccount: exceeds the QOS's per-account limit


def stuck_reason(state: str, detail: str | None) -> str | None:
    """The pending reason of a job that can never start as submitted, or None. ReqNodeNotAvail counts only when
    squeue names unavailable (down, drained) nodes, not when they are merely reserved."""
    if normalise(state) != "PENDING" or not detail:
        return None
    reason = detail.strip().strip("()").strip()
    word = reason.split(",", 1)[0].strip()
    if word in STUCK_REASONS or word.startswith(STUCK_PREFIXES) or STUCK_PATTERN.match(word):
        return reason
    if word == "ReqNodeNotAvail" and "UnavailableNodes" in reason:
        return reason
    return None


STAGE_TAIL_BYTES = 64 * 1024  # a stage line is printed at every stage change: the last one is near the end
_STAGE = re.compile(rb"### STAGE: *([^\r\n]*)")


def stage_of(log_path: str | Path | None, tail_bytes: int = STAGE_TAIL_BYTES) -> str | None:
    """The last `### STAGE:` of a raw log, reading only its last `tail_bytes` (a log can be gigabytes)."""
    if not log_path:
        return None
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            tail = f.read(tail_bytes)
    except OSError:
        return None
    found = _STAGE.findall(tail)
    return found[-1].decode("utf-8", "replace").strip()[:40] or None if found else None


def elapsed_of(row: RunRow) -> int | None:
    """Seconds the job has run: the scheduler's figure, else since it started (still running)."""
    if row.data.get("elapsed_s") is not None:
        return row.elapsed_s
    if row.data.get("started_at"):
        try:
            return int(_age_s(row.started_at))
        except ValueError:
            return None
    return None


def is_paused(state: str, detail: str | None = None) -> bool:
    """A job that will not move until someone acts: stopped, suspended, or pending because it is held."""
    return normalise(state) in PAUSED or (normalise(state) == "PENDING" and (detail or "") in HELD_REASONS)
