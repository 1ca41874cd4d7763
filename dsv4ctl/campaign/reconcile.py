"""A run whose submitting CLI died around sbatch (state SUBMITTING): its job found by the token it carries, or the
run marked failed once it is clearly lost, so `resume` can take it again."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ..scheduler import Scheduler
from ..store import SUBMIT_FAILED, SUBMITTING, RunRow, Store


def reconcile(store: Store, scheduler: Scheduler, row: RunRow) -> str | None:
    """Find the job of a SUBMITTING run (a CLI died around sbatch); mark the run failed once it is clearly lost,
    so `resume` can take it again. Both only if nobody moved the run meanwhile."""
    group, _, index = row.token.partition("-")
    spec_name = store.db.execute("SELECT name FROM experiments WHERE id = ?", [row.experiment_id]).fetchone()[0]
    base = scheduler.find_token(group, f"{spec_name}.{group}", Path(row.run_dir))
    job_id = None if base is None else (f"{base}_{index}" if index else base)
    if job_id:
        found = store.update_run_if(row.id, SUBMITTING, row.token, state="PENDING", job_id=job_id,
                                    array_task=index or None,
                                    submit_message="recovered: the submitting CLI stopped before recording the job")
        return job_id if found else None
    submitted = datetime.fromisoformat(row.submitted_at) if row.submitted_at else None
    if submitted and (datetime.now(submitted.tzinfo) - submitted).total_seconds() > scheduler.submit_grace_s:
        store.update_run_if(row.id, SUBMITTING, row.token, state=SUBMIT_FAILED,
                            submit_message="the submitting CLI stopped and no job carries this run's token")
    return None
