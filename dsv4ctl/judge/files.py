"""Judge files on disk: read a raw log and an optional sacct file, return the verdict."""

from __future__ import annotations

from pathlib import Path

from ..errors import LogError
from .scan import parse_file
from .sacct import SacctParseError, parse_sacct, summarise
from .rules import Verdict, VerdictOptions, judge


def judge_files(log: Path, sacct: Path | None = None, *, job_id: str | None = None, bos_id: int = 0,
                max_repeat_run: int = 8, max_tokens: int | None = None, ignore_eos: bool | None = None,
                requests: int | None = None) -> Verdict:
    try:
        facts = parse_file(str(log))
    except OSError as exc:
        raise LogError(f"cannot read log {log}: {exc}") from None
    scheduler = None
    if sacct is not None:
        try:
            records = parse_sacct(Path(sacct).read_text(encoding="utf-8", errors="replace"))
        except (OSError, SacctParseError) as exc:
            raise LogError(f"cannot read sacct file {sacct}: {exc}") from None
        if not records:
            raise LogError(f"{sacct} holds no sacct rows")
        scheduler = summarise(records, job_id or records[0].job_id)
        if scheduler is None:
            raise LogError(f"{sacct} has no job row for job {job_id or records[0].job_id}")
    options = VerdictOptions(bos_id=bos_id, max_repeat_run=max_repeat_run, expected_tokens=max_tokens,
                             ignore_eos=ignore_eos, expected_requests=requests)
    return judge(facts, scheduler, options)
