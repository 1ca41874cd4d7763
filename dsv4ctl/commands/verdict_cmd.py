"""`dsv4ctl verdict`: judge a raw job log (and its sacct record)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..report import output
from .options import DbOpt, JsonOpt, at_least

LogOpt = Annotated[Optional[Path], typer.Option("--log", help="Raw job log (the probe's output).", exists=True,
                                                dir_okay=False, readable=True)]
SacctOpt = Annotated[Optional[Path], typer.Option(
    "--sacct", help="sacct --parsable2 output for the job (with or without a header).", exists=True, dir_okay=False,
    readable=True)]


def verdict(job: Annotated[Optional[str], typer.Argument(
                help="A stored run: run id, label (J17), latest, job id or token; or a log file.")] = None,
            log: LogOpt = None,
            sacct: SacctOpt = None,
            job_id: Annotated[Optional[str], typer.Option(help="Which job or array task of the sacct text (default: the one the log names; refused when unclear).")]
            = None,
            bos_id: Annotated[int, typer.Option(help="Token id of BOS.", callback=at_least(0))] = 0,
            max_repeat_run: Annotated[int, typer.Option(help="Same token this many times in a row is degenerate.",
                                                          callback=at_least(2))]
            = 8,
            max_tokens: Annotated[Optional[int], typer.Option(
                help="Tokens asked per request (with --ignore-eos, fewer is degenerate).", callback=at_least(1))]
            = None,
            ignore_eos: Annotated[Optional[bool], typer.Option("--ignore-eos/--stop-at-eos",
                                                               help="Whether the run ignored EOS.")] = None,
            requests: Annotated[Optional[int], typer.Option(help="Requests expected in the log.",
                                                            callback=at_least(1))] = None,
            mode: Annotated[Optional[str], typer.Option(
                help="With --log: offline, serve or align [default: what the log's own markers say].")] = None,
            db: DbOpt = None,
            exit_codes: Annotated[str, typer.Option(
                "--exit-codes", callback=check_exit_codes,
                help="dsv4ctl (the codes below) or git-bisect: 0 passed, 1 failed, 125 could not be tested "
                     "(not submitted, cancelled, node failure, no log) for `git bisect run`.")] = "dsv4ctl",
            json: JsonOpt = False) -> None:
    """Judge a job: a stored run (JOB) or a raw log (--log) with its sacct record. Exit 0 if it passed, 1 if not,
    2 on usage errors, 4 if a stored run passed but is outside its performance reference (expect.perf or
    `dsv4ctl reference set`)."""
    if job is None and log is None:
        raise typer.BadParameter("give a stored run or --log PATH", param_hint="JOB / --log")
    if job is not None and log is not None:
        raise typer.BadParameter("give a stored run (JOB) or --log PATH, not both", param_hint="JOB / --log")
    if job is not None and _names_a_file(job):
        job, log = None, Path(job)  # `dsv4ctl verdict logs/J17.log`: a path where a run was expected is the log
    if exit_codes == "git-bisect":
        raise typer.Exit(_git_bisect_code(job, log, sacct, db, dict(
            job_id=job_id, bos_id=bos_id, max_repeat_run=max_repeat_run, max_tokens=max_tokens,
            ignore_eos=ignore_eos, requests=requests, mode=mode)))
    perf = None
    if job is not None:
        from ..analysis.perf import stored_check
        from ..campaign.watch import rejudge
        from .options import open_store

        store = open_store(db, must_exist=True)
        result, log = rejudge(job, store)
        perf = stored_check(store, store.find_run(job).id)
    else:
        result = _judge_log(log, sacct, mode, job_id=job_id, bos_id=bos_id, max_repeat_run=max_repeat_run,
                            max_tokens=max_tokens, ignore_eos=ignore_eos, requests=requests)
    if json:
        output.emit_json({**result.to_json(), "perf": perf} if job is not None else result.to_json())
    else:
        from ..report.verdict_view import show_verdict

        show_verdict(result, log, bos_id=bos_id)
        for failure in (perf or {}).get("failures", []):
            output.warn(f"performance: {failure['message']} ({perf['source']})")
    if result.passed and perf and not perf["within"]:
        from ..analysis.perf import EXIT_OUTSIDE_REFERENCE

        raise typer.Exit(EXIT_OUTSIDE_REFERENCE)
    raise typer.Exit(0 if result.passed else 1)


def _judge_log(log: Path, sacct: Path | None, mode: str | None, *, job_id: str | None, bos_id: int,
               max_repeat_run: int, max_tokens: int | None, ignore_eos: bool | None, requests: int | None):
    """A log on disk judged by its mode (modes.judge_log), as `ingest` and `verdict RUN` judge it (issue 29)."""
    from ..judge.rules import VerdictOptions
    from ..modes.registry import judge_log

    options = VerdictOptions(bos_id=bos_id, max_repeat_run=max_repeat_run, expected_tokens=max_tokens,
                             ignore_eos=ignore_eos, expected_requests=requests)
    _check_sacct_matches(log, sacct, job_id)
    return judge_log(log, sacct, job_id=job_id, mode=mode, options=options).verdict


_LOG_JOB = re.compile(rb"DSV4_JOB:[^\n]*?\bjob=([^\s]+)")


def _check_sacct_matches(log: Path, sacct: Path | None, job_id: str | None) -> None:
    """Refuse a sacct record of another job than the log's (issue 26 m17): the log's DSV4_JOB line names its job,
    and a one-job sacct file of a different job would judge the log with someone else's exit and state. --job-id
    says which record to take (it needs --sacct, else a usage error)."""
    from ..errors import UsageError
    from ..judge.sacct import SacctParseError, parse_sacct

    if sacct is None:
        if job_id is not None:
            raise UsageError(f"--job-id {job_id} picks a job of the --sacct text: give --sacct FILE too")
        return
    if job_id is not None:
        return
    try:
        with open(log, "rb") as f:
            found = _LOG_JOB.search(f.read(64 * 1024))
        records = parse_sacct(sacct.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SacctParseError):
        return  # judge_log says what is unreadable
    jobs = sorted({r.job_id for r in records})
    if not found or len(jobs) != 1:
        return
    logs_job = found.group(1).decode("utf-8", "replace").partition("_")[0]
    if logs_job != jobs[0]:  # a warning, not a refusal: a log copied from another cluster keeps its old job id
        output.warn(f"the sacct record {sacct.name} is job {jobs[0]}, the log's is {logs_job}: judged with it "
                    f"anyway; give the log's own record, or --job-id {jobs[0]} to say this one is meant")


def check_exit_codes(value: str) -> str:
    if value not in ("dsv4ctl", "git-bisect"):
        raise typer.BadParameter(f"{value!r} is not one of: dsv4ctl, git-bisect")
    return value


def _git_bisect_code(job: str | None, log: Path | None, sacct: Path | None, db: Path | None,
                     options: dict) -> int:
    """0 passed, 1 failed, 125 could not be tested (`git bisect run` skips the commit instead of blaming it), and
    GIT_BISECT_ABORT (128) when the command itself cannot work: no such run or database, a usage error, a run
    still in flight. git bisect stops on codes above 127, where 125 would skip every commit on a typo (issue 26
    M6)."""
    from ..bisect.rates import GIT_BISECT_EXIT, run_outcome
    from ..errors import Dsv4Error, UsageError
    from ..store import RunNotFound, StoreError
    from ..campaign.inflight import RunInFlight

    try:
        if job is not None:
            from ..campaign.watch import rejudge
            from .options import open_store

            result, log = rejudge(job, open_store(db, must_exist=True))
        else:
            result = _judge_log(log, sacct, options.pop("mode", None), **options)
    except (RunNotFound, StoreError, UsageError, RunInFlight) as exc:
        output.error(f"{exc}: aborting the bisection (exit {GIT_BISECT_ABORT})", hint=exc.hint)
        return GIT_BISECT_ABORT
    except (Dsv4Error, OSError) as exc:
        output.warn(f"could not be tested: {exc}")
        return GIT_BISECT_EXIT["untestable"]
    state = (result.to_json().get("scheduler") or {}).get("state")
    has_log = log is not None and log.exists() and log.stat().st_size > 0
    outcome = run_outcome(state, result.passed, has_log)
    output.text(f"{outcome}: {result.status}" + (f" ({state})" if state else ""))
    return GIT_BISECT_EXIT[outcome]


GIT_BISECT_ABORT = 128  # `git bisect run` stops the bisection on any exit code from 128 to 255


def _names_a_file(job: str) -> bool:
    """A path rather than a run id, label, job id or token: it has a folder or a log's suffix, and exists."""
    path = Path(job)
    return (len(path.parts) > 1 or path.suffix in (".log", ".out", ".txt", ".err")) and path.is_file()


def register(app: typer.Typer) -> None:
    app.command()(verdict)
