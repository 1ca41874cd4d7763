"""Campaigns: every `submit` records its whole plan in the store first, then submits the runs one group at a time.

Crash safety: the campaign and all its runs, each with a directory of its own (the run id is in its name), are
recorded in one transaction before any file is written or anything submitted: a CLI killed while planning leaves
nothing behind. Then every run's spec.json is written (a read-only or full runs directory stops here, with the
runs PLANNED). Each group of runs is then *claimed* (PLANNED -> SUBMITTING with a fresh token, in one transaction,
only if nobody changed it since it was read, so two `resume`s or a `resume` beside a `submit` never submit one run
twice), its job.sh written, submitted, and recorded PENDING with its job id. A CLI killed between sbatch and that
last write leaves a SUBMITTING run that `status` and `resume` find again by its token (in the job name); runs never
reached stay PLANNED and `resume` submits them, and nothing else. `campaigns.submitted_at` is set when the loop
ends: until then the campaign is resumable.
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

from .. import __version__, external
from ..errors import Dsv4Error, SpecInvalid, UsageError
from ..paths import project_root, runtime_dir
from ..spec.render import RAW_LOG_NAME, SCRIPT_NAME, SNAPSHOT_NAME, render_script, snapshot_text
from ..scheduler import Scheduler, SubmitError, get_scheduler, resolve_backend
from ..spec.models import ExperimentSpec
from ..spec.load import LoadedSpec, load_spec
from ..judge.states import FINAL
from ..store import LATEST, PLANNED, SUBMIT_FAILED, SUBMITTING, RunRow, Store, StoreError
from .reconcile import reconcile  # noqa: F401 - re-exported

SUBMIT_RETRIES = 3
SUBMIT_BACKOFF_S = 2.0
FAULT_ENV = "DSV4CTL_FAULT"  # tests only: "crash-after-submit[:N]" kills the CLI right after the N-th sbatch


class RunsDirError(Dsv4Error):
    """The runs directory cannot be written (read-only, full, not a folder)."""


@dataclass
class SubmitOutcome:
    campaign: str
    run_ids: list[int] = field(default_factory=list)
    submitted: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    why: dict[int, str] = field(default_factory=dict)  # resume: why each run is resubmitted
    kept: int = 0  # resume: runs left as they are (judged, or still in flight)


@dataclass
class PlannedRun:
    spec: ExperimentSpec
    source: Path
    point: dict
    repeat: int
    of: int = 1  # how many repeats of this point the submission makes
    label: str | None = None  # None: the store gives it r<run id>


def apply_labels(runs: list[PlannedRun], label: str | None = None) -> list[PlannedRun]:
    """`label` (from --label) names the whole submission, else each spec file's `label:` names its runs; where a
    label covers several runs they get a suffix: J18.1, J18.2, ..."""
    groups: dict[tuple[str, Path | None], list[PlannedRun]] = {}
    for run in runs:
        if label or run.spec.label:
            groups.setdefault((label, None) if label else (run.spec.label, run.source), []).append(run)
    for (base, _), members in groups.items():
        for i, run in enumerate(members, 1):
            run.label = base if len(members) == 1 else f"{base}.{i}"
    return runs


def plan(spec_paths: list[Path], repeats: int | None = None, label: str | None = None) -> list[PlannedRun]:
    """Every run a submission makes: matrix points x repeats. Refuses the lot if any point is invalid."""
    points: list[LoadedSpec] = [p for path in spec_paths for p in load_spec(path)]
    bad = [f for p in points for f in p.errors]
    if bad:
        raise SpecInvalid(bad)
    return apply_labels([PlannedRun(p.spec, p.source, p.point, r, repeats or p.spec.repeats)
                         for p in points for r in range(repeats or p.spec.repeats)], label)


def interleave(spec_paths: list[Path], repeats: int | None,
               label: str | None = None) -> tuple[list[PlannedRun], list[tuple[int, str]]]:
    """An A/B submission: BASELINE and CANDIDATE runs alternating A B A B, so drift on the cluster hits both alike;
    each A/B pair is recorded (pair id, side) for the paired analysis."""
    if len(spec_paths) != 2:
        raise UsageError(f"--ab takes exactly two specs, BASELINE CANDIDATE; {len(spec_paths)} given")
    a, b = plan([spec_paths[0]], repeats), plan([spec_paths[1]], repeats)
    if len(a) != len(b):
        raise Dsv4Error(f"--ab: the two specs expand to {len(a)} and {len(b)} runs; give them the same matrix")
    runs: list[PlannedRun] = []
    pairs: list[tuple[int, str]] = []
    for pair, (left, right) in enumerate(zip(a, b)):
        runs += [left, right]
        pairs += [(pair, "baseline"), (pair, "candidate")]
    return (apply_labels(runs, label) if label else runs), pairs


def _campaign_name(runs: list[PlannedRun]) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", runs[0].spec.name.split(".")[0]) if runs else "campaign"
    return f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


# ---- where runs go ----------------------------------------------------------------------------------------------


def _run_dir_name(run_id: int, repeat: int) -> str:
    return f"r{repeat}-run{run_id}"


def _inside(root: Path, path: Path, what: str) -> Path:
    """`path`, resolved, if it stays strictly inside `root`; a name like `../x` is refused."""
    resolved = path.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise Dsv4Error(f"{what} would put runs at {resolved}, outside the runs directory {root}: use a plain name")
    return resolved


def campaign_dir(runs_root: Path, name: str) -> Path:
    """runs/<campaign>/, created; refused when the name leaves the runs directory or the folder cannot be made."""
    root = Path(runs_root).resolve()
    path = _inside(root, root / name, f"campaign name {name!r}")
    _write(lambda: path.mkdir(parents=True, exist_ok=True), path)
    return path


def _write(action, where: Path) -> None:
    try:
        action()
    except OSError as exc:
        failed = exc.filename or where
        raise RunsDirError(f"{failed}: cannot write the runs directory ({exc.strerror or exc}); "
                           "nothing more was submitted") from None


def _check_distinct(dirs: list[str]) -> None:
    seen: set[str] = set()
    for run_dir in dirs:
        if run_dir in seen:
            raise Dsv4Error(f"two runs would share the directory {run_dir}: refusing to plan them")
        seen.add(run_dir)


# ---- plan and submit --------------------------------------------------------------------------------------------


def submit(store: Store, spec_paths: list[Path], backend: str | None = None, *, repeats: int | None = None,
           campaign: str | None = None, runs_root: Path = Path("runs"), array: bool = True,
           command: str = "", pairs: list[tuple[int, str]] | None = None,
           planned: list[PlannedRun] | None = None) -> SubmitOutcome:
    """Plan, record and submit. `planned` and `pairs` (pair id, side per run) come from an A/B submission."""
    backend = resolve_backend(backend)
    scheduler = get_scheduler(backend)
    if campaign == LATEST:
        raise UsageError(f"{LATEST!r} names the newest campaign; pick another --campaign name")
    runs = planned if planned is not None else plan(spec_paths, repeats)
    from ..modes.registry import prepare_submission

    prepare_submission(store, runs)  # e.g. align.reference: run:latest -> run:<id>, fixed before anything is recorded
    name = campaign or _campaign_name(runs)
    root = campaign_dir(runs_root, name)  # a read-only runs directory stops here, before anything is recorded
    campaign_id, groups = record_plan(store, name, backend, command, runs, root, array=array, pairs=pairs)
    outcome = SubmitOutcome(name, run_ids=[run_id for group in groups for run_id in group])
    write_snapshots(store, store.runs_by_ids(outcome.run_ids))
    try:
        for run_ids in groups:
            rows = store.runs_by_ids(run_ids)
            submit_rows(store, scheduler, rows, array=Path(rows[0].script_path).parent != Path(rows[0].run_dir),
                        outcome=outcome)
        store.mark_submitted(campaign_id)
    except KeyboardInterrupt:
        from .inflight import interrupted

        raise interrupted(store, name, outcome.run_ids) from None  # which jobs are queued, how to cancel them
    return outcome


def record_plan(store: Store, name: str, backend: str, command: str, runs: list[PlannedRun], root: Path, *,
                array: bool, pairs: list[tuple[int, str]] | None) -> tuple[int, list[list[int]]]:
    """The campaign and every run with its own directory, in one transaction; returns the submission groups
    (one Slurm array for the repeats of a point, else one run each)."""
    provenance = {"git_sha": external.git_sha(project_root()), "dsv4ctl_version": __version__}
    groups: dict[str, list[tuple[int, PlannedRun]]] = {}
    with store.transaction():
        campaign_id = store.create_campaign(name, backend, command, planned_runs=len(runs))
        for index, run in enumerate(runs):
            spec = run.spec
            experiment_id = store.experiment_id(spec.name, spec.spec_hash(), snapshot_text(spec), str(run.source))
            use_array = array and backend == "slurm" and run.of > 1 and pairs is None
            pair_id, side = pairs[index] if pairs else (None, None)
            run_id = store.add_run(
                campaign_id=campaign_id, experiment_id=experiment_id, point_json=json.dumps(run.point),
                point_label=",".join(f"{k}={v}" for k, v in run.point.items()), repeat_index=run.repeat,
                pair_id=pair_id, side=side, backend=backend, token=secrets.token_hex(6), state=PLANNED,
                switches_json=json.dumps(spec.resolved_switches()), tags=",".join(spec.tags), ingested=0,
                label=run.label, **provenance)
            key = f"{spec.name}:{spec.spec_hash()}" if use_array else f"single:{index}"
            groups.setdefault(key, []).append((run_id, run))
        dirs = [_place(store, root, members, array=not key.startswith("single:")) for key, members in groups.items()]
        _check_distinct([d for group in dirs for d in group])
    return campaign_id, [[run_id for run_id, _ in members] for members in groups.values()]


def _place(store: Store, root: Path, members: list[tuple[int, PlannedRun]], *, array: bool) -> list[str]:
    """Give each run of a group its directory: r<N>-run<id>/ alone, or task-<i>/ beside one array's job.sh."""
    first_id, first = members[0]
    point_dir = _inside(root, root / first.spec.name, f"experiment name {first.spec.name!r}")
    if array:
        point_dir = point_dir / f"array-run{first_id}"
    placed = []
    for i, (run_id, run) in enumerate(members):
        run_dir = point_dir / (f"task-{i}" if array else _run_dir_name(run_id, run.repeat))
        script = (point_dir if array else run_dir) / SCRIPT_NAME
        store.update_run(run_id, run_dir=str(run_dir), log_path=str(run_dir / RAW_LOG_NAME),
                         script_path=str(script))
        placed.append(str(run_dir))
    return placed


def write_snapshots(store: Store, rows: list[RunRow]) -> None:
    """Each run's directory and spec.json, before anything is submitted: a read-only or full runs directory
    fails here in one line, with every run still PLANNED (resumable once the disk is fixed)."""
    for row in rows:
        run_dir = Path(row.run_dir)
        snapshot = store.spec_json(row.experiment_id)
        _write(lambda: run_dir.mkdir(parents=True, exist_ok=True), run_dir)
        _write(lambda: _replace_text(run_dir / SNAPSHOT_NAME, snapshot), run_dir)


def _replace_text(path: Path, text: str) -> None:
    """Write a file whole or not at all: a job of a concurrent submission may be reading it."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
                outcome: SubmitOutcome) -> bool:
    """Claim these runs and submit them: one job, or one Slurm array for a group of repeats. False when another
    process claimed them first (it submits them, not us)."""
    if any(row.state not in (PLANNED, SUBMIT_FAILED) and row.state not in FINAL for row in rows):
        return False  # submitted meanwhile (in flight): never a second job for it
    group_token = secrets.token_hex(6)
    tokens = [f"{group_token}-{i}" for i in range(len(rows))] if array else [group_token]
    if not store.claim_runs([(row.id, row.state, row.token, token) for row, token in zip(rows, tokens)]):
        return False
    spec = _spec_of(store, rows[0])
    script = Path(rows[0].script_path)
    try:
        _write(lambda: _write_script(script, spec, group_token, array), script.parent)
    except RunsDirError:
        for row, token in zip(rows, tokens):  # give the runs back: nothing was submitted
            store.update_run_if(row.id, SUBMITTING, token, state=PLANNED, submitted_at=None)
        raise
    job_name = f"{spec.name}.{group_token}"
    try:
        job_id = _submit_with_retries(scheduler, script, script.parent, group_token, job_name,
                                      len(rows) if array else None)
    except SubmitError as exc:
        for row, token in zip(rows, tokens):
            store.update_run_if(row.id, SUBMITTING, token, state=SUBMIT_FAILED, submit_message=str(exc),
                                script_path=str(script))
            outcome.failed.append((row.id, str(exc)))
        return True
    _fault_after_submit()
    for i, (row, token) in enumerate(zip(rows, tokens)):
        store.update_run_if(row.id, SUBMITTING, token, state="PENDING", job_id=f"{job_id}_{i}" if array else job_id,
                            array_task=str(i) if array else None, submit_message=None, script_path=str(script),
                            **_FRESH_JOB)
        outcome.submitted += 1
    return True


# What a new job starts without: the last job's detail, exit and times never show on the new one (m9: `PENDING
# (by 0)` after a resume of a cancelled run).
_FRESH_JOB = dict.fromkeys(("state_detail", "state_source", "exit_code", "signal", "elapsed_s", "max_rss_kib",
                            "node", "started_at", "ended_at", "judge_error"))


def _write_script(script: Path, spec: ExperimentSpec, token: str, array: bool) -> None:
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render_script(spec, str(runtime_dir()), token=token, array=array), encoding="utf-8")
    script.chmod(0o755)


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


# ---- interrupted submissions ------------------------------------------------------------------------------------


def _to_redo(row: RunRow, judged: set[int]) -> bool:
    """Never got a job, or its job ended and left no verdict (a judge error is dsv4ctl's, not the job's)."""
    if row.state in (PLANNED, SUBMIT_FAILED):
        return True
    return row.state in FINAL and row.id not in judged and not row.data.get("judge_error")


def _why_redo(row: RunRow) -> str:
    """Why `resume` resubmits a run, said for each (issue 26 m9): a user's cancel is never undone silently."""
    if row.state == PLANNED:
        return "never submitted"
    if row.state == SUBMIT_FAILED:
        return "its submission failed" + (f" ({row.submit_message[:80]})" if row.data.get("submit_message") else "")
    return (f"job {row.job_id} ended {row.state}" + (f" ({row.state_detail})" if row.data.get("state_detail") else "")
            + " before it was judged" + (" (a cancel is undone by this resubmission)"
                                          if row.state.startswith("CANCELLED") else ""))


def resume(store: Store, campaign: str) -> SubmitOutcome:
    """Resubmit the runs of a campaign that never got a job or never produced a verdict; nothing else."""
    info = store.campaign(campaign)
    rows = store.runs(campaign=campaign)
    if info.get("planned_runs") is not None and len(rows) != info["planned_runs"]:
        raise StoreError(f"campaign {campaign!r}: its plan holds {len(rows)} of {info['planned_runs']} runs; "
                         "the store was changed by hand")
    scheduler = get_scheduler(info["backend"])
    for row in rows:
        if row.state == SUBMITTING:
            reconcile(store, scheduler, row)
    rows = store.runs(campaign=campaign)
    judged = set(store.verdict_summaries([r.id for r in rows]))
    redo = [r for r in rows if _to_redo(r, judged)]
    write_snapshots(store, redo)
    outcome = SubmitOutcome(info["name"], why={r.id: _why_redo(r) for r in redo}, kept=len(rows) - len(redo))
    for row in redo:
        # Claimed as it was read when chosen: if another process submitted it since, the claim fails. (Reading it
        # again here would see it PENDING under the other's token, and claim and submit it a second time.)
        alone = RunRow({**row.data, "script_path": str(Path(row.run_dir) / SCRIPT_NAME)})  # array task: own job
        if submit_rows(store, scheduler, [alone], array=False, outcome=outcome):
            outcome.run_ids.append(row.id)
    if not any(r.state in (PLANNED, SUBMITTING) for r in store.runs(campaign=campaign)):
        store.mark_submitted(info["id"])
    return outcome


class NothingToDo(Dsv4Error):
    """The command found nothing to act on."""
