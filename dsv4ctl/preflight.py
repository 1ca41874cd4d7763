"""Pre-flight: ask the cluster whether it would ever run a spec's job, before anything is queued.

`sbatch --test-only` checks the rendered script against the partition, its limits, the account and QOS, GRES and
node counts, and answers with where and when the job would start, or why it never could (the J17 spec as written,
64 CPUs and 8 DCUs, sits PENDING forever on a small partition: this says so in a second).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from .paths import runtime_dir
from .render import write_run_files
from .spec import ExperimentSpec


@dataclass(frozen=True)
class Preflight:
    ok: bool
    message: str  # sbatch's own words: "Job N to start at ... on nodes ..." or why it is refused


def check(spec: ExperimentSpec) -> Preflight:
    """Render the spec's job script into a scratch folder and let sbatch judge it (nothing is submitted)."""
    from .scheduler.slurm import SlurmScheduler

    with tempfile.TemporaryDirectory(prefix="dsv4ctl-preflight-") as scratch:
        script = write_run_files(spec, Path(scratch), str(runtime_dir()))
        ok, said = SlurmScheduler().test_only(script, Path(scratch))
    return Preflight(ok=ok, message=said)
