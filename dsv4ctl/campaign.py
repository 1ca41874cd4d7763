"""Campaigns: every `submit` plans all its runs in the store first, then submits them one by one.

Crash safety: a run is PLANNED (recorded) before its files are written, SUBMITTING (with a unique token that is
also in the job name) right before sbatch, and PENDING with its job id right after. A CLI killed between sbatch and
that last write leaves a SUBMITTING run that `status` finds again by its token; runs never reached stay PLANNED
and `resume` submits them, and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import __version__, external
from .errors import Dsv4Error, SpecInvalid
from .paths import project_root, runtime_dir
from .render import RAW_LOG_NAME, SCRIPT_NAME, SNAPSHOT_NAME, render_script, snapshot_text
from .scheduler import Scheduler, SubmitError, get_scheduler, resolve_backend
from .spec import ExperimentSpec
from .specload import LoadedSpec, load_spec
from .store import PLANNED, SUBMIT_FAILED, SUBMITTING, RunRow, Store, now

SUBMIT_RETRIES = 3
SUBMIT_BACKOFF_S = 2.0
FAULT_ENV = "DSV4CTL_FAULT"  # tests only: "crash-after-submit[:N]" kills the CLI right after the N-th sbatch


@dataclass
class SubmitOutcome:
    campaign: str
    run_ids: list[int] = field(default_factory=list)
    submitted: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class PlannedRun:
    spec: ExperimentSpec
    source: Path
    point: dict
    repeat: int
    of: int = 1  # how many repeats of this point the submission makes


def plan(spec_paths: list[Path], repeats: int | None = None) -> list[PlannedRun]:
    """Every run a submission makes: matrix points x repeats. Refuses the lot if any point is invalid."""
    points: list[LoadedSpec] = [p for path in spec_paths for p in load_spec(path)]
    bad = [f for p in points for f in p.errors]
    if bad:
        raise SpecInvalid(bad)
    return [PlannedRun(p.spec, p.source, p.point, r, repeats or p.spec.repeats)
            for p in points for r in range(repeats or p.spec.repeats)]


def interleave(spec_paths: list[Path], repeats: int | None) -> tuple[list[PlannedRun], list[tuple[int, str]]]:
    """An A/B submission: BASELINE and CANDIDATE runs alternating A B A B, so drift on the cluster hits both alike;
    each A/B pair is recorded (pair id, side) for the paired analysis."""
    if len(spec_paths) != 2:
        raise Dsv4Error("--ab takes exactly two specs: BASELINE CANDIDATE")
    a, b = plan([spec_paths[0]], repeats), plan([spec_paths[1]], repeats)
    if len(a) != len(b):
        raise Dsv4Error(f"--ab: the two specs expand to {len(a)} and {len(b)} runs; give them the same matrix")
    runs: list[PlannedRun] = []
    pairs: list[tuple[int, str]] = []
    for pair, (left, right) in enumerate(zip(a, b)):
        runs += [left, right]
        pairs += [(pair, "baseline"), (pair, "candidate")]
    return runs, pairs


def _campaign_name(runs: list[PlannedRun]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", runs[0].spec.name.split(".")[0]) if runs else "campaign"
    return f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def submit(store: Store, spec_paths: list[Path], backend: str = "auto", *, repeats: int | None = None,
           campaign: str | None = None, runs_root: Path = Path("runs"), array: bool = True,
           command: str = "", pairs: list[tuple[int, str]] | None = None,
           planned: list[PlannedRun] | None = None) -> SubmitOutcome:
    """Plan, record and submit. `planned` and `pairs` (pair id, side per run) come from an A/B submission."""
    backend = resolve_backend(backend)
    scheduler = get_scheduler(backend)
    runs = planned if planned is not None else plan(spec_paths, repeats)
    name = campaign or _campaign_name(runs)
    campaign_id = store.create_campaign(name, backend, command)
    provenance = {"git_sha": external.git_sha(project_root()), "dsv4ctl_version": __version__}
    outcome = SubmitOutcome(name)
    groups: dict[tuple[str, str], list[int]] = {}
    for index, run in enumerate(runs):
        spec = run.spec
        snapshot = snapshot_text(spec)
        experiment_id = store.experiment_id(spec.name, spec.spec_hash(), snapshot, str(run.source))
        use_array = array and backend == "slurm" and run.of > 1 and pairs is None
        group = f"{spec.name}:{spec.spec_hash()}" if use_array else f"single:{index}"
        point_dir = Path(runs_root) / name / spec.name
        run_dir = point_dir / (f"task-{run.repeat}" if use_array else f"r{run.repeat}")
        pair_id, side = pairs[index] if pairs else (None, None)
        run_id = store.add_run(
            campaign_id=campaign_id, experiment_id=experiment_id, point_json=json.dumps(run.point),
            point_label=",".join(f"{k}={v}" for k, v in run.point.items()), repeat_index=run.repeat,
            pair_id=pair_id, side=side, backend=backend, token=secrets.token_hex(6), state=PLANNED,
            run_dir=str(run_dir.resolve()), log_path=str((run_dir / RAW_LOG_NAME).resolve()),
            script_path=str(((point_dir if use_array else run_dir) / SCRIPT_NAME).resolve()),
            switches_json=json.dumps(spec.resolved_switches()), tags=",".join(spec.tags), ingested=0,
            **provenance)
        outcome.run_ids.append(run_id)
        groups.setdefault((group, str(point_dir)), []).append(run_id)
    for (group, _), run_ids in groups.items():
        rows = store.runs_by_ids(run_ids)
        submit_rows(store, scheduler, rows, array=not group.startswith("single:"), outcome=outcome)
    return outcome


def _spec_of(store: Store, row: RunRow) -> ExperimentSpec:
    return ExperimentSpec.model_validate_json(store.spec_json(row.experiment_id))


def _fault_after_submit() -> None:
    fault = os.environ.get(FAULT_ENV, "")
    if fault.startswith("crash-after-submit"):
        countdown = int(fault.partition(":")[2] or 1) - 1
        if countdown <= 0:
            os._exit(70)  # as if the CLI were killed between sbatch and the database write
        os.environ[FAULT_ENV] = f"crash-after-submit:{countdown}"


def submit_rows(store: Store, scheduler: Scheduler, rows: list[RunRow], *, array: bool,
                outcome: SubmitOutcome) -> None:
    """Write the files of these runs and submit them: one job, or one Slurm array for a group of repeats."""
    spec = _spec_of(store, rows[0])
    runtime = str(runtime_dir())
    script = Path(rows[0].script_path)
    script.parent.mkdir(parents=True, exist_ok=True)
    group_token = rows[0].token
    tokens = [f"{group_token}-{i}" for i in range(len(rows))] if array else [group_token]
    for row, token in zip(rows, tokens):
        run_dir = Path(row.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / SNAPSHOT_NAME).write_text(snapshot_text(spec), encoding="utf-8")
        store.update_run(row.id, token=token, state=SUBMITTING, submitted_at=now())
    script.write_text(render_script(spec, runtime, token=group_token, array=array), encoding="utf-8")
    script.chmod(0o755)
    job_name = f"{spec.name}.{group_token}"
    try:
        job_id = _submit_with_retries(scheduler, script, script.parent, group_token, job_name,
                                      len(rows) if array else None)
    except SubmitError as exc:
        for row in rows:
            store.update_run(row.id, state=SUBMIT_FAILED, submit_message=str(exc))
            outcome.failed.append((row.id, str(exc)))
        return
    _fault_after_submit()
    for i, row in enumerate(rows):
        store.update_run(row.id, state="PENDING", job_id=f"{job_id}_{i}" if array else job_id,
                         array_task=str(i) if array else None, submit_message=None)
        outcome.submitted += 1


def _submit_with_retries(scheduler: Scheduler, script: Path, cwd: Path, token: str, job_name: str,
                         array_size: int | None) -> str:
    delay = SUBMIT_BACKOFF_S
    for attempt in range(1, SUBMIT_RETRIES + 1):
        try:
            return scheduler.submit(script, cwd, token, job_name, array_size)
        except SubmitError as exc:
            if not exc.transient or attempt == SUBMIT_RETRIES:
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def reconcile(store: Store, scheduler: Scheduler, row: RunRow, grace_s: float = 60) -> str | None:
    """Find the job of a SUBMITTING run (the CLI died around sbatch); mark it failed once it is clearly lost."""
    group, _, index = row.token.partition("-")
    spec_name = store.db.execute("SELECT name FROM experiments WHERE id = ?", [row.experiment_id]).fetchone()[0]
    if scheduler.name == "local":
        pid_file = Path(row.run_dir) / "local-wrapper.pid"
        job_id = f"local-{pid_file.read_text().strip()}" if pid_file.exists() else None
    else:
        base = scheduler.find_token(group, f"{spec_name}.{group}")
        job_id = None if base is None else (f"{base}_{index}" if index else base)
    if job_id:
        store.update_run(row.id, state="PENDING", job_id=job_id, array_task=index or None,
                         submit_message="recovered: the submitting CLI stopped before recording the job")
        return job_id
    submitted = datetime.fromisoformat(row.submitted_at) if row.submitted_at else None
    if submitted and (datetime.now(submitted.tzinfo) - submitted).total_seconds() > grace_s:
        store.update_run(row.id, state=SUBMIT_FAILED,
                         submit_message="the submitting CLI stopped and no job carries this run's token")
    return None


def resume(store: Store, campaign: str) -> SubmitOutcome:
    """Resubmit the runs of a campaign that never got a job or never produced a verdict; nothing else."""
    info = store.campaign(campaign)
    scheduler = get_scheduler(info["backend"])
    outcome = SubmitOutcome(campaign)
    judged = set(store.verdict_summaries([r.id for r in store.runs(campaign=campaign)]))
    for row in store.runs(campaign=campaign):
        from .judge.states import FINAL as FINAL_STATES

        redo = row.state in (PLANNED, SUBMIT_FAILED) or (row.state in FINAL_STATES and row.id not in judged)
        if not redo:
            continue
        if Path(row.script_path).parent != Path(row.run_dir):  # was an array task: now a job of its own
            store.update_run(row.id, script_path=str(Path(row.run_dir) / SCRIPT_NAME))
        store.update_run(row.id, token=secrets.token_hex(6), job_id=None, array_task=None)
        submit_rows(store, scheduler, [store.find_run(str(row.id))], array=False, outcome=outcome)
        outcome.run_ids.append(row.id)
    return outcome


class NothingToDo(Dsv4Error):
    """The command found nothing to act on."""
