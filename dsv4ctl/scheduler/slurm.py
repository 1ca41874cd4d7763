"""The Slurm backend: sbatch --parsable, one sacct call per poll for every job, squeue for pending reasons,
scontrol when the accounting database is down, scancel. All through `external.run`."""

from __future__ import annotations

import re
from pathlib import Path

from .. import external
from ..judge.sacct import (
    DEFAULT_COLUMNS,
    SACCT_FORMAT,
    SacctParseError,
    parse_elapsed,
    parse_exit_code,
    parse_sacct,
    summarise,
)
from ..judge.states import FINAL, normalise
from .base import JobRef, JobStatus, SubmitError

# sbatch messages worth another try (busy or unreachable controller); anything else is a refusal.
TRANSIENT = re.compile(r"socket timed out|unable to contact slurm controller|temporarily unavailable|"
                       r"try again|connection refused|zero bytes were transmitted|resource temporarily", re.I)
_SCONTROL_FIELD = re.compile(r"(\w+)=(\S*)")


def _split(job_id: str) -> tuple[str, str | None]:
    base, _, task = job_id.partition("_")
    return base, task or None


class SlurmScheduler:
    name = "slurm"
    submit_grace_s = 300.0  # longer than sbatch's retries (3 tries, 60 s time-outs, backoff)

    def submit(self, script: Path, run_dir: Path, token: str, job_name: str,
               array_size: int | None = None) -> str:
        argv = ["sbatch", "--parsable", f"--job-name={job_name}", f"--comment=dsv4ctl:{token}"]
        if array_size and array_size > 1:
            argv.append(f"--array=0-{array_size - 1}")
        argv.append(str(script.resolve()))
        result = external.run(argv, cwd=run_dir, timeout=60)
        if not result.ok:
            raise SubmitError(result.message, transient=result.returncode == 124
                              or bool(TRANSIENT.search(result.message)))
        job_id = result.stdout.strip().split(";")[0]  # `ID` or `ID;cluster`
        if not job_id.isdigit():
            raise SubmitError(f"sbatch printed no job id: {result.stdout.strip()!r}", transient=False)
        return job_id

    def test_only(self, script: Path, run_dir: Path) -> tuple[bool, str]:
        """`sbatch --test-only`: whether the cluster would run the script, and sbatch's words (where and when it
        would start, or why it never could)."""
        result = external.run(["sbatch", "--test-only", str(script.resolve())], cwd=run_dir, timeout=60)
        return result.ok, re.sub(r"sbatch: (?:error: )?", "", result.message).strip()

    def node_groups(self) -> list:
        """The partitions' node groups as sinfo reports them (CPUs, memory, GRES, time limit, node count); empty
        when sinfo fails: a pre-flight then names no resource, and sbatch's own words stand."""
        from .cluster_fit import SINFO_FORMAT, parse_sinfo

        result = external.run(["sinfo", "--noheader", "-o", SINFO_FORMAT], timeout=30)
        return parse_sinfo(result.stdout) if result.ok else []

    def poll(self, jobs: list[JobRef]) -> tuple[dict[str, JobStatus], list[str]]:
        if not jobs:
            return {}, []
        notes: list[str] = []
        bases = sorted({_split(j.job_id)[0] for j in jobs}, key=int)
        result = external.run(["sacct", "-j", ",".join(bases), "--parsable2", "--noheader",
                               f"--format={SACCT_FORMAT}"], timeout=60)
        records = None
        if result.ok:
            try:
                records = parse_sacct(result.stdout, DEFAULT_COLUMNS)
            except SacctParseError as exc:
                notes.append(f"sacct output unreadable ({exc}); asking slurmctld instead")
        else:
            notes.append(f"sacct failed ({result.message}); states come from slurmctld (scontrol), "
                         "without step details")
        if records is None:
            return self._from_scontrol(jobs), notes
        statuses: dict[str, JobStatus] = {}
        for job in jobs:
            base, task = _split(job.job_id)
            summary = summarise(records, base, task)
            if summary is None:
                continue
            batch = next((s for s in summary.steps if s.step == "batch"), None)
            rows = [r for r in records if r.job_id == base and r.array_task == task]
            statuses[job.job_id] = JobStatus(
                job_id=job.job_id, state=summary.state, state_detail=summary.state_detail,
                exit_code=summary.exit_code, signal=summary.signal, elapsed_s=summary.elapsed_s,
                max_rss_kib=summary.max_rss_kib, node=summary.node_list, source="sacct",
                started_at=rows[0].start if rows else None, ended_at=rows[0].end if rows else None,
                # sacct lags: the batch step's exit and MaxRSS arrive seconds after the job row turns final.
                settled=summary.is_final and batch is not None and batch.is_final,
                sacct_text="\n".join("|".join(_row_fields(r)) for r in rows))
        # sacct does not know jobs submitted a moment ago, and its live states lag (a job stopped with SIGSTOP reads
        # RUNNING there): one squeue call for those jobs says what slurmctld sees now, with the pending reason.
        live = [j for j in jobs if j.job_id not in statuses or not statuses[j.job_id].is_final]
        if live:
            for job_id, queued in self._from_squeue(live).items():
                statuses[job_id] = _merge(statuses.get(job_id), queued)
        return statuses, notes

    def _from_squeue(self, jobs: list[JobRef]) -> dict[str, JobStatus]:
        bases = sorted({_split(j.job_id)[0] for j in jobs}, key=int)
        result = external.run(["squeue", "-h", "-r", "-j", ",".join(bases), "-o", "%i|%T|%r|%N"], timeout=60)
        found: dict[str, JobStatus] = {}
        if result.ok:
            for line in result.stdout.splitlines():
                parts = line.split("|")
                if len(parts) == 4:
                    found[parts[0]] = JobStatus(parts[0], normalise(parts[1]), state_detail=parts[2] or None,
                                                node=parts[3] or None, source="squeue")
        # A job neither sacct nor squeue knows yet is UNKNOWN, never a success.
        return {j.job_id: found.get(j.job_id) or JobStatus(j.job_id, "UNKNOWN", source="none") for j in jobs}

    def _from_scontrol(self, jobs: list[JobRef]) -> dict[str, JobStatus]:
        result = external.run(["scontrol", "-o", "show", "job"], timeout=60)
        known: dict[str, JobStatus] = {}
        if result.ok:
            for line in result.stdout.splitlines():
                fields = dict(_SCONTROL_FIELD.findall(line))
                if "JobId" not in fields:
                    continue
                key = fields["JobId"]
                if fields.get("ArrayJobId") and fields.get("ArrayTaskId", "N/A") != "N/A":
                    key = f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"
                exit_code, signal = parse_exit_code(fields.get("ExitCode", ""))
                state = normalise(fields.get("JobState", "UNKNOWN"))
                known[key] = JobStatus(key, state, exit_code=exit_code, signal=signal,
                                       elapsed_s=parse_elapsed(fields.get("RunTime", "")),
                                       node=fields.get("NodeList") if fields.get("NodeList") != "(null)" else None,
                                       state_detail=fields.get("Reason") if fields.get("Reason") != "None" else None,
                                       source="scontrol", settled=state in FINAL)
        return {j.job_id: known.get(j.job_id) or JobStatus(j.job_id, "UNKNOWN", source="none") for j in jobs}

    def cancel(self, jobs: list[JobRef]) -> list[str]:
        if not jobs:
            return []
        result = external.run(["scancel", *[j.job_id for j in jobs]], timeout=60)
        return [] if result.ok else [f"scancel: {result.message}"]

    def find_token(self, token: str, job_name: str, run_dir: Path | None = None) -> str | None:
        """The job an interrupted submit created, found by its unique job name."""
        result = external.run(["squeue", "-h", "--name", job_name, "-o", "%F"], timeout=60)
        if result.ok and result.stdout.strip():
            return result.stdout.split()[0]
        result = external.run(["sacct", "-X", "-n", "-P", "--name", job_name, "-S", "now-7days",
                               "-o", "JobID"], timeout=60)
        if result.ok and result.stdout.strip():
            return _split(result.stdout.split()[0])[0]
        return None


def _merge(accounted: JobStatus | None, queued: JobStatus) -> JobStatus:
    """sacct's record with squeue's live state and reason where squeue knows the job and it is not final yet."""
    if accounted is None:
        return queued
    if queued.source == "none" or queued.state in FINAL:
        return accounted
    accounted.state, accounted.state_detail = queued.state, queued.state_detail or accounted.state_detail
    accounted.node = accounted.node or queued.node
    return accounted


def _row_fields(record) -> list[str]:
    return [record.raw_job_id, record.job_name or "", record.state + (f" {record.state_detail}"
            if record.state_detail else ""), f"{record.exit_code}:{record.signal}" if record.exit_code is not None
            else "", str(record.elapsed_s or ""), f"{record.max_rss_kib}K" if record.max_rss_kib is not None
            else "", record.start or "", record.end or "", record.node_list or ""]
