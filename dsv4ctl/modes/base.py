"""What a mode is: the one protocol `offline`, `serve` and `align` implement (and a new mode would). The watcher,
`status`, `verdict`, `ingest` and the store's writer ask the registry (modes/registry.py) for a run's mode and call
these; none of them compares a mode's name. The spec half of a mode (its sections, rules and recorded metrics) is
read by the spec layer: spec/models.py MODE_SECTIONS and spec/modes.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..judge.rules import Verdict, VerdictOptions
    from ..judge.sacct import SchedulerSummary
    from ..judge.scan import LogFacts
    from ..store import Store

Judge = Callable[["LogFacts", "SchedulerSummary | None", "dict[str, Any] | None", Path, "VerdictOptions"], "Verdict"]
# A judged stored run, settled against the mode's own evidence: (the verdict, the mode's record to store or None).
SettleStored = Callable[["Store", int, "Verdict"], "tuple[Verdict, dict[str, Any] | None]"]
# The same for a log judged without a spec (`verdict --log`, `ingest`): (verdict, record, spec settings or None).
SettleLog = Callable[[Path, "LogFacts", "Verdict"], "tuple[Verdict, dict[str, Any] | None]"]
Evidence = Callable[["LogFacts"], "list[str]"]  # files beside raw.log its judge reads, relative to the run folder
Record = Callable[["Store", int, "dict[str, Any]"], None]  # stores the mode's record (inside the caller's transaction)
# At submit, before anything is recorded: checks (and may fix in place) the planned runs of this mode; raises a
# Dsv4Error to refuse the submission (an align run's `reference: run:latest` fixed to the run it names now).
Prepare = Callable[["Store", "list[Any]"], None]
Stored = Callable[["Store", int], "dict[str, Any] | None"]  # the record stored when the run was judged, or None
Show = Callable[["dict[str, Any]"], None]  # draws that record in `dsv4ctl show`


def no_evidence(facts: LogFacts) -> list[str]:
    return []


def settled_stored(store: Store, run_id: int, verdict: Verdict) -> tuple[Verdict, dict[str, Any] | None]:
    return verdict, None


def settled_log(log: Path, facts: LogFacts, verdict: Verdict) -> tuple[Verdict, dict[str, Any] | None]:
    return verdict, None


@dataclass(frozen=True)
class Mode:
    """One mode of running a spec. `markers` says whether a log carries this mode's own markers (the default mode
    has none); `named_in_experiment`: an ingested log of this mode records its mode in the experiment (the default
    mode does not, so its experiments keep the hash they had before modes existed)."""

    name: str
    judge: Judge
    markers: Callable[[LogFacts], bool] | None = None
    settle_stored: SettleStored = settled_stored
    settle_log: SettleLog = settled_log
    evidence: Evidence = no_evidence
    record: Record | None = None
    prepare: Prepare | None = None
    named_in_experiment: bool = True
    tag: str = ""  # shown after a run in one-line listings ("[serve]"); empty for the default mode
    settings_section: str | None = None  # the spec section a log's record carries its settings for (`settings`)
    record_key: str | None = None  # the key of every run's JSON that holds this mode's record (None for others)
    stored: Stored | None = None  # reads the record back (with record_key)
    show: Show | None = None  # draws it in `dsv4ctl show`
