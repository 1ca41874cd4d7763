"""The one place dsv4ctl runs external commands (sbatch, sacct, squeue, scontrol, scancel, git).

Every call is counted in `CALLS` by program name, so tests can check, on a live cluster, that `status` makes one
sacct call per poll whatever the number of jobs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .errors import Dsv4Error

CALLS: Counter[str] = Counter()


class CommandMissing(Dsv4Error):
    """A program dsv4ctl needs is not on PATH."""


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def message(self) -> str:
        """What the program said, for error reports: stderr, else stdout, one paragraph."""
        text = (self.stderr.strip() or self.stdout.strip())
        return " ".join(text.split()) or f"{self.argv[0]} exited {self.returncode}"


def run(argv: list[str], *, cwd: Path | None = None, timeout: float = 60, input: str | None = None,
        env: dict[str, str] | None = None) -> Result:
    """Run a program with arguments as a list (never through a shell); a time-out is reported as exit 124."""
    program = argv[0]
    if shutil.which(program) is None:
        raise CommandMissing(f"`{program}` is not on PATH")
    CALLS[Path(program).name] += 1
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Result(tuple(argv), 124, out, f"{program} timed out after {timeout:g} s")
    return Result(tuple(argv), done.returncode, done.stdout, done.stderr)


def available(program: str) -> bool:
    return shutil.which(program) is not None


def git_sha(cwd: Path) -> str | None:
    """The commit of the project checkout, with `-dirty` when it has changes; None outside a git checkout."""
    if not available("git"):
        return None
    head = run(["git", "rev-parse", "HEAD"], cwd=cwd, timeout=10)
    if not head.ok:
        return None
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, timeout=10)
    return head.stdout.strip() + ("-dirty" if dirty.ok and dirty.stdout.strip() else "")


def stream(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> int:
    """Run a long program with its output going straight to ours; return its exit code."""
    import os

    if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
        raise CommandMissing(f"`{argv[0]}` is not on PATH")
    CALLS[Path(argv[0]).name] += 1
    return subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL).returncode
