"""Judge files on disk: read a raw log and an optional sacct file, return the verdict.

A sacct file can hold several jobs or array tasks; the one judged is the one the log belongs to: `--job-id`, else
the log's own `DSV4_JOB: ... job=<id>` line (with `array_job=`/`array_task=` where the script prints them), else
the `task-<i>/` folder an array task writes its log in. With several candidates and nothing to choose, it refuses
rather than judge another job's record.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import LogError
from .scan import parse_file
from .sacct import SacctParseError, SacctRecord, SchedulerSummary, parse_sacct, summarise
from .rules import Verdict, VerdictOptions, judge

_TASK_DIR = re.compile(r"task-(\d+)")


def _jobs(records: list[SacctRecord]) -> list[tuple[str, str | None]]:
    """The (job id, array task) of every job row, in file order."""
    seen: list[tuple[str, str | None]] = []
    for r in records:
        if r.step is None and (r.job_id, r.array_task) not in seen:
            seen.append((r.job_id, r.array_task))
    return seen


def _key(job: tuple[str, str | None]) -> str:
    return job[0] + (f"_{job[1]}" if job[1] is not None else "")


def job_of_log(log: Path, fields: dict[str, str], records: list[SacctRecord]) -> tuple[str, str | None]:
    """The job (id, array task) of `records` the log belongs to, from its DSV4_JOB fields or its task-<i>/ folder;
    LogError when it cannot be told."""
    jobs = _jobs(records)
    if len(jobs) == 1:
        return jobs[0]
    named = []
    if fields.get("array_job") and fields.get("array_task"):
        named.append((fields["array_job"], fields["array_task"]))
    if fields.get("job"):
        base, _, task = fields["job"].partition("_")
        named.append((base, task or None))
    task_dir = next((m.group(1) for part in reversed(Path(log).resolve().parts[:-1])
                     if (m := _TASK_DIR.fullmatch(part))), None)
    if task_dir is not None and len({job for job, _ in jobs}) == 1:
        named.append((jobs[0][0], task_dir))
    for candidate in named:
        if candidate in jobs:
            return candidate
    listed = ", ".join(_key(j) for j in jobs[:6]) + (" ..." if len(jobs) > 6 else "")
    raise LogError(f"the sacct file holds {len(jobs)} jobs ({listed}) and nothing in {log} says which is its own: "
                   "name it with --job-id")


def _summary(log: Path, fields: dict[str, str], sacct: Path, job_id: str | None) -> SchedulerSummary:
    try:
        records = parse_sacct(Path(sacct).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SacctParseError) as exc:
        raise LogError(f"cannot read sacct file {sacct}: {exc}") from None
    if not records:
        raise LogError(f"{sacct} holds no sacct rows")
    if job_id:
        base, _, task = job_id.partition("_")
        job = (base, task or None)
    else:
        job = job_of_log(log, fields, records)
    scheduler = summarise(records, job[0], job[1])
    if scheduler is None:
        raise LogError(f"{sacct} has no job row for job {_key(job)}")
    return scheduler


def judge_files(log: Path, sacct: Path | None = None, *, job_id: str | None = None, bos_id: int = 0,
                max_repeat_run: int = 8, max_tokens: int | None = None, ignore_eos: bool | None = None,
                requests: int | None = None) -> Verdict:
    options = VerdictOptions(bos_id=bos_id, max_repeat_run=max_repeat_run, expected_tokens=max_tokens,
                             ignore_eos=ignore_eos, expected_requests=requests)
    try:
        facts = parse_file(str(log), options)
    except OSError as exc:
        raise LogError(f"cannot read log {log}: {exc}") from None
    scheduler = _summary(log, facts.job_fields, sacct, job_id) if sacct is not None else None
    if facts.serve:  # a serve run's log: its serve files lie beside it (issue 14)
        from .serve_files import judge_serve_run

        return judge_serve_run(facts, scheduler, None, Path(log).parent)
    return judge(facts, scheduler, options)
