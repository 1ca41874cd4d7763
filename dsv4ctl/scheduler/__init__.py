"""One scheduler interface, two backends registered by name: `slurm` (sbatch/sacct) and `local` (bash on this
machine, the embedded default when no sbatch is on PATH). Job states are the scheduler's words, in explicit sets."""

from __future__ import annotations

from .. import external
from ..errors import UsageError
from .base import FINAL_STATES, JobRef, JobStatus, Scheduler, SubmitError  # noqa: F401 - the interface, re-exported


BACKENDS = ("slurm", "local")  # registered by name; each is a module of this package with one Scheduler class


def backend_names() -> tuple[str, ...]:
    return BACKENDS


def resolve_backend(name: str | None) -> str:
    """`auto` is slurm where sbatch is on PATH, else local; None is the configured backend (DSV4CTL_BACKEND, then
    dsv4ctl.toml, then auto)."""
    if name is None:
        from ..config import backend

        name = backend()
    if name == "auto":
        return "slurm" if external.available("sbatch") else "local"
    if name not in backend_names():
        raise UsageError(f"unknown backend {name!r}: use {', '.join(backend_names())} or auto")
    return name


def get_scheduler(name: str) -> Scheduler:
    name = resolve_backend(name)
    if name == "slurm":
        from .slurm import SlurmScheduler

        return SlurmScheduler()
    from .local import LocalScheduler

    return LocalScheduler()
