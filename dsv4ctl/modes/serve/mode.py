"""mode: serve as a plug-in (issue 14): its run is judged with the serve files beside its log (requests, memory,
server.log), and an ingested serve log brings those files along."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import Mode

if TYPE_CHECKING:
    from ...judge.rules import Verdict, VerdictOptions
    from ...judge.sacct import SchedulerSummary
    from ...judge.scan import LogFacts

STAGES = ("serve start", "serve stop")


def markers(facts: LogFacts) -> bool:
    """The serve job's DSV4_SERVE line or its `serve start` / `serve stop` stages."""
    names = [name for _, name in facts.stages] + ([facts.last_stage[1]] if facts.last_stage else [])
    return bool(facts.serve) or any(name in STAGES for name in names)


def judge(facts: LogFacts, scheduler: SchedulerSummary | None, snapshot: dict[str, Any] | None, run_dir: Path,
          options: VerdictOptions) -> Verdict:
    from ...judge.serve_files import judge_serve_run

    return judge_serve_run(facts, scheduler, snapshot, run_dir)


def evidence(facts: LogFacts) -> list[str]:
    """The serve files by their standard names, and the ones the log's DSV4_SERVE line lists (plain names only)."""
    from ...judge.serve_files import FILES

    listed = facts.serve.get("files") if isinstance(facts.serve.get("files"), dict) else {}
    return list(FILES.values()) + [n for n in listed.values()
                                   if isinstance(n, str) and n and Path(n).name == n and not n.startswith(".")]


MODE = Mode(name="serve", judge=judge, markers=markers, evidence=evidence, tag="serve")
