"""Pre-flight: ask the cluster whether it would ever run a spec's job, before anything is queued.

`sbatch --test-only` checks the rendered script against the partition, its limits, the account and QOS, GRES and
node counts, and answers with where and when the job would start, or why it never could (the J17 spec as written,
64 CPUs and 8 DCUs, sits PENDING forever on a small partition: this says so in a second).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .. import external
from .cluster_fit import Refusal, refusals
from ..errors import Dsv4Error
from ..paths import runtime_dir
from ..spec.render import write_run_files
from ..spec.models import ExperimentSpec

class Planned(Protocol):
    """What the preflight reads of a planned run (campaign.plan's PlannedRun)."""

    source: Any
    spec: ExperimentSpec
    point: Any


@dataclass(frozen=True)
class Preflight:
    ok: bool
    message: str  # sbatch's own words: "Job N to start at ... on nodes ..." or why it is refused
    refused: tuple[Refusal, ...] = ()  # the resources the partition cannot give, when sbatch refused

    def summary(self) -> str:
        """One line: the resources named first (what to edit), then sbatch's words."""
        if self.ok or not self.refused:
            return self.message
        return "; ".join(r.message for r in self.refused) + f" (sbatch: {self.message})"

    def to_json(self) -> dict:
        return {"ok": self.ok, "message": self.message, "refused": [r.to_json() for r in self.refused]}


def check(spec: ExperimentSpec) -> Preflight:
    """Render the spec's job script into a scratch folder and let sbatch judge it (nothing is submitted); when it
    refuses, name the resources the partition's nodes lack (sinfo)."""
    from .slurm import SlurmScheduler

    scheduler = SlurmScheduler()
    with tempfile.TemporaryDirectory(prefix="dsv4ctl-preflight-") as scratch:
        script = write_run_files(spec, Path(scratch), str(runtime_dir()))
        ok, said = scheduler.test_only(script, Path(scratch))
    if ok:
        return Preflight(ok=True, message=said)
    return Preflight(ok=False, message=said, refused=tuple(refusals(spec.slurm, scheduler.node_groups())))


class PreflightUnavailable(Dsv4Error):
    """A pre-flight was asked for where it cannot run (no sbatch on PATH, a backend other than slurm)."""


def require_sbatch(flag: str) -> None:
    if not external.available("sbatch"):
        raise PreflightUnavailable(f"{flag} needs Slurm's sbatch on PATH (run it on the cluster's login node)")


@dataclass(frozen=True)
class PointCheck:
    name: str
    point: dict
    result: Preflight


def check_planned(planned: list[Planned]) -> list[PointCheck]:
    """`submit --check`: sbatch --test-only once per distinct point of a submission (its repeats render the same
    script), in submission order."""
    require_sbatch("--check")
    seen: dict[tuple[str, str], PointCheck] = {}
    for run in planned:
        key = (str(run.source), run.spec.spec_hash())
        if key not in seen:
            seen[key] = PointCheck(run.spec.name, run.point, check(run.spec))
    return list(seen.values())
