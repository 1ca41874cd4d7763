"""Which trace files a target names: a trace file, a folder of them (a run's ranks), or a stored run, whose
probe printed where its traces went (`DSV4_PROFILE: {...}` in raw.log) beside raw.log in `<run dir>/profile/`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

TRACE_GLOBS = ("*.pt.trace.json", "*.pt.trace.json.gz", "*kernel_trace.csv", "*_results.json", "*.trace.json",
               "*.trace.json.gz")
PROFILE_MARKER = "DSV4_PROFILE: "  # runtime/dsv4rt/profiling.py prints it
MAX_TRACE_FILES = 1024  # ranks of one run (8 nodes of 8 is 64)
_RANK = re.compile(r"(?:rank|_tp|tp)(\d+)")


class NoProfile(UsageError):
    """A target that names no trace: no such file, an empty folder, a run profiled never."""


@dataclass(frozen=True)
class TraceSet:
    """One profile's files (one per rank) and the window they cover."""

    label: str
    files: tuple[Path, ...]
    window: str
    run_id: int | None = None


def trace_files(folder: Path) -> list[Path]:
    found = sorted({p for pattern in TRACE_GLOBS for p in folder.rglob(pattern) if p.is_file()
                    and "capture_traces" not in p.parts})
    if len(found) > MAX_TRACE_FILES:
        raise NoProfile(f"{folder}: {len(found)} trace files, more than {MAX_TRACE_FILES}: name one run's folder")
    return found


def rank_hint(path: Path) -> int | None:
    match = _RANK.search(path.name)
    return int(match.group(1)) if match else None


def profile_marker(log_path: Path | None) -> dict[str, Any] | None:
    """The last `DSV4_PROFILE: {...}` line of a run's raw.log, read line by line."""
    if log_path is None or not log_path.is_file():
        return None
    found = None
    with log_path.open("r", encoding="utf-8", errors="replace") as log:
        for line in log:
            at = line.find(PROFILE_MARKER)
            if at >= 0:
                try:
                    value = json.loads(line[at + len(PROFILE_MARKER):])
                except json.JSONDecodeError:
                    continue
                found = value if isinstance(value, dict) else found
    return found


def from_path(target: str) -> TraceSet | None:
    path = Path(target)
    if path.is_file():
        return TraceSet(target, (path,), "trace")
    if path.is_dir():
        files = trace_files(path)
        if not files:
            raise NoProfile(f"{target}: a folder without trace files ({', '.join(TRACE_GLOBS[:3])}, ...)")
        return TraceSet(target, tuple(files), "trace")
    return None


def from_run(run) -> TraceSet:
    """A stored run's traces: where its probe said they went, else `<run dir>/profile/`."""
    log = Path(run.log_path) if run.log_path else None
    marker = profile_marker(log) or {}
    folder = Path(marker["dir"]) if marker.get("dir") else (Path(run.run_dir) / "profile" if run.run_dir else None)
    if folder is not None and not folder.is_absolute() and run.run_dir:
        folder = Path(run.run_dir) / folder
    files = trace_files(folder) if folder is not None and folder.is_dir() else []
    if not files:
        where = f" (looked in {folder})" if folder is not None else ""
        raise NoProfile(f"run {run.label or run.id} has no profile traces{where}: give its spec a `profile:` "
                        "section and run it again")
    return TraceSet(str(run.label or run.id), tuple(files), str(marker.get("window") or "run"), run.id)
