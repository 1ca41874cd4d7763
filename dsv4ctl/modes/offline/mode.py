"""mode: offline as a plug-in: its run is judged by the verdict's rules as they are, from its log alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import Mode

if TYPE_CHECKING:
    from ...judge.rules import Verdict, VerdictOptions
    from ...judge.sacct import SchedulerSummary
    from ...judge.scan import LogFacts


def judge(facts: LogFacts, scheduler: SchedulerSummary | None, snapshot: dict[str, Any] | None, run_dir: Path,
          options: VerdictOptions) -> Verdict:
    from ...judge.rules import judge as judge_rules

    return judge_rules(facts, scheduler, options)


MODE = Mode(name="offline", judge=judge, named_in_experiment=False)
