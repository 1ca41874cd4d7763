"""Argument and option types shared by several commands, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SpecArg = Annotated[Path, typer.Argument(help="Experiment spec (YAML).", exists=True, dir_okay=False,
                                         readable=True)]
SpecsArg = Annotated[list[Path], typer.Argument(help="Experiment spec files (YAML).", exists=True, dir_okay=False,
                                                readable=True)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
DbOpt = Annotated[Optional[Path], typer.Option("--db", envvar="DSV4CTL_DB", help="Results database.",
                                               show_default="./results.db")]
BackendOpt = Annotated[str, typer.Option(help="slurm, local, or auto (slurm when sbatch is on PATH).")]
