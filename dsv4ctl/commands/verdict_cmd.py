"""`dsv4ctl verdict`: judge a raw job log (and its sacct record)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import output
from .options import JsonOpt

LogOpt = Annotated[Path, typer.Option("--log", help="Raw job log (the probe's output).", exists=True,
                                      dir_okay=False, readable=True)]
SacctOpt = Annotated[Optional[Path], typer.Option(
    "--sacct", help="sacct --parsable2 output for the job (with or without a header).", exists=True, dir_okay=False,
    readable=True)]


def verdict(log: LogOpt,
            sacct: SacctOpt = None,
            job_id: Annotated[Optional[str], typer.Option(help="Which job of the sacct text (default: the first).")]
            = None,
            bos_id: Annotated[int, typer.Option(help="Token id of BOS.")] = 0,
            max_repeat_run: Annotated[int, typer.Option(help="Same token this many times in a row is degenerate.")]
            = 8,
            max_tokens: Annotated[Optional[int], typer.Option(
                help="Tokens asked per request (with --ignore-eos, fewer is degenerate).")] = None,
            ignore_eos: Annotated[Optional[bool], typer.Option("--ignore-eos/--stop-at-eos",
                                                               help="Whether the run ignored EOS.")] = None,
            requests: Annotated[Optional[int], typer.Option(help="Requests expected in the log.")] = None,
            json: JsonOpt = False) -> None:
    """Judge a job from its raw log and sacct record. Exit 0 if it passed, 1 if not, 2 on usage errors."""
    from ..judge import judge_files

    result = judge_files(log, sacct, job_id=job_id, bos_id=bos_id, max_repeat_run=max_repeat_run,
                         max_tokens=max_tokens, ignore_eos=ignore_eos, requests=requests)
    if json:
        output.emit_json(result.to_json())
    else:
        from ..verdict_view import show_verdict

        show_verdict(result, log, bos_id=bos_id)
    raise typer.Exit(0 if result.passed else 1)


def register(app: typer.Typer) -> None:
    app.command()(verdict)
