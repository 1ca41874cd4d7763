"""One list of job states, with the named sets every part of dsv4ctl uses (store, watcher, both backends, verdict).

Slurm's words: every base state `sacct`, `squeue` and `scontrol` can print (Slurm 20.11-24.05 `job_state_string`,
long forms; `squeue`'s short codes map to them). dsv4ctl adds its own words for what Slurm cannot know: a run
planned but not submitted yet, a submission in progress or refused, a job the scheduler cannot find any more.

Rule of thumb: a state in FINAL will not change (judge it); anything else, known or not, is followed (an unknown
state is never dropped: it is treated as active until the scheduler says otherwise).
"""

from __future__ import annotations

# Final: the job will not run again by itself.
FINAL = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "REVOKED", "TIMEOUT"})
# Active: queued, running, or paused somewhere between (held, stopped, suspended, requeued, signalled).
ACTIVE = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED",
                    "STOPPED", "COMPLETING", "CONFIGURING", "SPECIAL_EXIT", "STAGE_OUT", "SIGNALING",
                    "RESV_DEL_HOLD", "POWER_UP_NODE", "UPDATE_DB", "LAUNCH_FAILED", "RECONFIG_FAIL"})
# Final states where the job was stopped from outside before it could finish its work.
KILLED = frozenset({"TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "DEADLINE", "BOOT_FAIL",
                    "REVOKED"})
# Paused: active, but it will not progress until someone acts (a wait should say so instead of spinning quietly).
PAUSED = frozenset({"STOPPED", "SUSPENDED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"})

# dsv4ctl's own words, before a job exists and when it cannot be found.
PLANNED, SUBMITTING, SUBMIT_FAILED, UNKNOWN, LOST = "PLANNED", "SUBMITTING", "SUBMIT_FAILED", "UNKNOWN", "LOST"
OWN = frozenset({PLANNED, SUBMITTING, SUBMIT_FAILED, UNKNOWN, LOST})

# squeue's compact codes (`%t`), long form.
SQUEUE_CODES = {"BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING", "CG": "COMPLETING",
                "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PD": "PENDING",
                "PR": "PREEMPTED", "R": "RUNNING", "RD": "RESV_DEL_HOLD", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD",
                "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING", "SE": "SPECIAL_EXIT",
                "SO": "STAGE_OUT", "ST": "STOPPED", "S": "SUSPENDED", "TO": "TIMEOUT"}
ACTIVE_OR_UNKNOWN_NOTE = "an unknown state is followed as active"


def normalise(state: str) -> str:
    """The bare upper-case word: `CANCELLED by 0` -> CANCELLED, `cd` -> COMPLETED, `` -> UNKNOWN."""
    word = (state or "").strip().split(" ", 1)[0].upper().rstrip("+")
    return SQUEUE_CODES.get(word, word) or UNKNOWN


def is_final(state: str) -> bool:
    return normalise(state) in FINAL


def is_waiting(state: str) -> bool:
    """Still to be followed: submitted and not final. Unknown words count (never dropped); PLANNED and
    SUBMIT_FAILED do not (nothing is on the scheduler to follow)."""
    word = normalise(state)
    return word not in FINAL and word not in (PLANNED, SUBMIT_FAILED, LOST)
