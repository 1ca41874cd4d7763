"""One judgement per mode (issue 29), wherever a run is judged: a watch or `status` settling a job, `verdict RUN`,
`verdict --log`, `ingest`. Each goes through `judge_facts` with the run's mode, so a serve run is always joined
with its serve files and an align run always compared from its capture; evidence that is missing never passes.

The mode of a submitted run is its spec's. The mode of a log judged without a spec (`verdict --log`, `ingest`) is
read from the log's own markers: the serve job's DSV4_SERVE line and `serve start` stage, the align job's `align ...`
stages; `--mode` names it when the markers are missing or disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LogError, UsageError

if TYPE_CHECKING:
    from ..judge.rules import Verdict, VerdictOptions
    from ..judge.sacct import SchedulerSummary
    from ..judge.scan import LogFacts

MODES = ("offline", "serve", "align")
SERVE_STAGES = ("serve start", "serve stop")
REFERENCE_LINE = b"align reference run:"  # `align reference run:J17: compared when dsv4ctl judges the run`
MAX_REFERENCE_SCAN_LINES = 1 << 22


def markers_mode(facts: LogFacts) -> str | None:
    """The mode the log's markers say ("offline" when it has none of serve's or align's), None when they say both."""
    names = [name for _, name in facts.stages] + ([facts.last_stage[1]] if facts.last_stage else [])
    serve = bool(facts.serve) or any(name in SERVE_STAGES for name in names)
    align = any(name.startswith("align ") for name in names)
    if serve and align:
        return None
    return "serve" if serve else "align" if align else "offline"


def log_mode(facts: LogFacts, given: str | None, log: Path) -> str:
    """`--mode` when given (checked against the markers), else the markers' mode; UsageError when they disagree."""
    found = markers_mode(facts)
    if given is not None:
        if given not in MODES:
            raise UsageError(f"--mode {given!r}: one of {', '.join(MODES)}")
        if found not in (None, "offline", given):
            raise UsageError(f"--mode {given} but {log} has the markers of a {found} run: judging it as {given} "
                             f"would ignore its {found} evidence")
        return given
    if found is None:
        raise UsageError(f"{log} has the markers of both a serve and an align run: say which with --mode")
    return found


def judge_facts(facts: LogFacts, scheduler: SchedulerSummary | None, mode: str, snapshot: dict[str, Any] | None,
                run_dir: Path, options: VerdictOptions) -> Verdict:
    """The one dispatch on the mode: serve runs joined with the serve files in `run_dir`, the others by the rules
    (an align run's capture is folded in by the caller, which knows the reference)."""
    from ..judge.rules import judge

    if mode == "serve":
        from ..judge.serve_files import judge_serve_run

        return judge_serve_run(facts, scheduler, snapshot, run_dir)
    return judge(facts, scheduler, options)


def align_settings(log: Path, facts: LogFacts) -> dict[str, Any]:
    """The align settings a log without a spec was captured with: its spec.json beside it (a run directory) when
    that is an align spec, else the defaults; the reference the log itself names (a `hf` capture lies beside it,
    `run:X` was a run of the database it was submitted to)."""
    from ..spec.render import SNAPSHOT_NAME
    from ..spec.models import AlignSpec

    settings = AlignSpec().model_dump(mode="json")
    try:
        beside = json.loads((log.parent / SNAPSHOT_NAME).read_text(encoding="utf-8"))
        if isinstance(beside, dict) and beside.get("mode") == "align" and isinstance(beside.get("align"), dict):
            settings = AlignSpec.model_validate(beside["align"]).model_dump(mode="json")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        pass  # no spec beside the log, or not one: the defaults
    if any(name.startswith("align reference (") for _, name in facts.stages):
        settings["reference"] = "hf"  # the job captured transformers' side beside its own
    elif named := _reference_named(log):
        settings["reference"] = named
    return settings


def _reference_named(log: Path) -> str | None:
    """`run:X` of the log's `align reference run:X: compared when ...` line, or None."""
    try:
        with open(log, "rb") as stream:
            for number, raw in enumerate(stream):
                if number > MAX_REFERENCE_SCAN_LINES:
                    break
                if raw.startswith(REFERENCE_LINE):
                    name = raw[len(b"align reference "):].split(b":", 2)
                    return "run:" + name[1].decode("utf-8", "replace")[:128] if len(name) > 1 else None
    except OSError:
        return None
    return None


@dataclass
class LogJudgement:
    verdict: Verdict
    mode: str
    alignment: dict[str, Any] | None = None  # an align log's, with the settings it was compared under


def judge_log(log: Path, sacct: Path | None = None, *, job_id: str | None = None, mode: str | None = None,
              options: VerdictOptions | None = None, facts: LogFacts | None = None) -> LogJudgement:
    """A log on disk (and its sacct text) judged by its mode: for an align log, compared with the capture beside
    it. `verdict --log` and `ingest` both; `verdict RUN` of the ingested run judges the same way."""
    from .align.result import ALIGN_DIR, alignment_in, fold
    from ..judge.files import _summary
    from ..judge.rules import VerdictOptions
    from ..judge.scan import parse_file

    options = options or VerdictOptions()
    if facts is None:
        try:
            facts = parse_file(str(log), options)
        except OSError as exc:
            raise LogError(f"cannot read log {log}: {exc}") from None
    scheduler = _summary(log, facts.job_fields, sacct, job_id) if sacct is not None else None
    mode = log_mode(facts, mode, log)
    verdict = judge_facts(facts, scheduler, mode, None, Path(log).parent, options)
    alignment = None
    if mode == "align":
        settings = align_settings(Path(log), facts)
        alignment = alignment_in(Path(log).parent / ALIGN_DIR, settings)
        verdict = fold(verdict, alignment, str(log))
        alignment["settings"] = settings
    return LogJudgement(verdict, mode, alignment)
