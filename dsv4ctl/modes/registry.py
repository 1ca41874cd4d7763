"""The modes by name, and one judgement per mode (issue 29) wherever a run is judged: a watch or `status` settling
a job, `verdict RUN`, `verdict --log`, `ingest`. Each asks `mode_of(name)` and calls the mode's own functions
(modes/base.py), so a serve run is always joined with its serve files and an align run always compared from its
capture; evidence that is missing never passes. Adding a mode: its package (modes/<name>/: mode.py, spec_rules.py)
and one line here, one in spec/modes.py, its sections in spec/models.py MODE_SECTIONS.

The mode of a submitted run is its spec's. The mode of a log judged without a spec (`verdict --log`, `ingest`) is
read from the log's own markers (each mode's `markers`); `--mode` names it when they are missing or disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LogError, UsageError
from .align.mode import MODE as ALIGN
from .base import Mode
from .offline.mode import MODE as OFFLINE
from .serve.mode import MODE as SERVE

if TYPE_CHECKING:
    from ..judge.rules import Verdict, VerdictOptions
    from ..judge.sacct import SchedulerSummary
    from ..judge.scan import LogFacts

REGISTRY: dict[str, Mode] = {mode.name: mode for mode in (OFFLINE, SERVE, ALIGN)}
MODES = tuple(REGISTRY)
# The mode of a log or snapshot that names none: spec/models.py's DEFAULT_MODE, the same name (tests/test_layout.py
# checks). Not imported from there: judging a log must not load the spec's pydantic models (~0.1 s of start-up).
DEFAULT_MODE = OFFLINE.name


def mode_of(name: str | None) -> Mode:
    """The mode of this name (the default mode for None); UsageError naming the known ones otherwise."""
    found = REGISTRY.get(name or DEFAULT_MODE)
    if found is None:
        raise UsageError(f"unknown mode {name!r}: one of {', '.join(MODES)}")
    return found


def stored_records(store: Any, run_id: int) -> dict[str, Any]:
    """Each mode's record of a run under its key of the run's JSON (`align`: the alignment, None for a run of
    another mode): every key present for every run, so the JSON has one shape."""
    return {mode.record_key: mode.stored(store, run_id) for mode in REGISTRY.values()
            if mode.record_key and mode.stored}


def show_records(data: dict[str, Any]) -> None:
    """`dsv4ctl show`: each mode's record that the run has, drawn by its mode; the keys taken out of `data`."""
    for mode in REGISTRY.values():
        if mode.record_key:
            record = data.pop(mode.record_key, None)
            if record and mode.show:
                mode.show(record)


def prepare_submission(store: Any, planned: list[Any]) -> None:
    """Each mode's checks of its planned runs at submit (`Mode.prepare`), before anything is recorded."""
    by_mode: dict[str, list[Any]] = {}
    for run in planned:
        by_mode.setdefault(run.spec.mode, []).append(run)
    for name, runs in by_mode.items():
        prepare = mode_of(name).prepare
        if prepare is not None:
            prepare(store, runs)


def markers_mode(facts: LogFacts) -> str | None:
    """The mode the log's markers say (the default when it has none of any mode's), None when they say two."""
    found = [mode.name for mode in REGISTRY.values() if mode.markers is not None and mode.markers(facts)]
    if len(found) > 1:
        return None
    return found[0] if found else DEFAULT_MODE


def log_mode(facts: LogFacts, given: str | None, log: Path) -> str:
    """`--mode` when given (checked against the markers), else the markers' mode; UsageError when they disagree."""
    found = [mode.name for mode in REGISTRY.values() if mode.markers is not None and mode.markers(facts)]
    if given is not None:
        if given not in REGISTRY:
            raise UsageError(f"--mode {given!r}: one of {', '.join(MODES)}")
        others = [name for name in found if name != given]
        if len(found) == 1 and others:
            raise UsageError(f"--mode {given} but {log} has the markers of a {others[0]} run: judging it as {given} "
                             f"would ignore its {others[0]} evidence")
        return given
    if len(found) > 1:
        raise UsageError(f"{log} has the markers of both a {found[0]} and an {found[1]} run: say which with --mode")
    return found[0] if found else DEFAULT_MODE


def judge_facts(facts: LogFacts, scheduler: SchedulerSummary | None, mode: str, snapshot: dict[str, Any] | None,
                run_dir: Path, options: VerdictOptions) -> Verdict:
    """The one dispatch on the mode: the mode's judge (a serve run joined with the serve files in `run_dir`, the
    others by the rules; an align run's capture is folded in by `settle_stored` / `settle_log`)."""
    return mode_of(mode).judge(facts, scheduler, snapshot, run_dir, options)


@dataclass
class LogJudgement:
    verdict: Verdict
    mode: str
    record: dict[str, Any] | None = None  # the mode's record (an align log's alignment, with its settings)

    @property
    def alignment(self) -> dict[str, Any] | None:
        return self.record


def judge_log(log: Path, sacct: Path | None = None, *, job_id: str | None = None, mode: str | None = None,
              options: VerdictOptions | None = None, facts: LogFacts | None = None) -> LogJudgement:
    """A log on disk (and its sacct text) judged by its mode, then settled against the mode's evidence beside it.
    `verdict --log` and `ingest` both; `verdict RUN` of the ingested run judges the same way."""
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
    found = mode_of(log_mode(facts, mode, log))
    verdict = found.judge(facts, scheduler, None, Path(log).parent, options)
    verdict, record = found.settle_log(Path(log), facts, verdict)
    return LogJudgement(verdict, found.name, record)
