"""The job side of `profile:` (issue 23): vLLM's profiler config for a window of engine steps, start and stop
around the generation, and the DSV4_PROFILE line that says where the traces went. Standard library plus what the
engine's venv has (vLLM >= 0.13's `profiler_config`; the field names are vLLM 0.32.0's ProfilerConfig).

Traces land in `./profile/` (the run directory: raw.log is beside it), one per rank, named by vLLM
(`rank<N>.<ns>.pt.trace.json.gz`). A spec without `profile:` changes nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PROFILE_DIR = "profile"
MARKER = "DSV4_PROFILE: "  # read by dsv4ctl/profile/sources.py (not one of judge.markers' DSV4 keys)


def _section(spec: dict[str, Any]) -> dict[str, Any] | None:
    section = spec.get("profile")
    return section if isinstance(section, dict) else None


def engine_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """The LLM(...) keyword that turns vLLM's torch profiler on for the spec's window (nothing without one)."""
    section = _section(spec)
    if section is None:
        return {}
    folder = Path(PROFILE_DIR).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return {"profiler_config": {
        "profiler": "torch", "torch_profiler_dir": str(folder),
        "torch_profiler_with_stack": bool(section.get("with_stack", True)),
        "torch_profiler_record_shapes": bool(section.get("record_shapes", False)),
        "torch_profiler_use_gzip": True, "torch_profiler_dump_cuda_time_total": False,
        "ignore_frontend": True,  # the frontend's CPU trace has no rank and covers the whole range
        "delay_iterations": int(section.get("skip_steps", 4)), "max_iterations": int(section.get("steps", 8)),
    }}


_started: dict[str, float] = {}


def start(llm, spec: dict[str, Any]) -> None:
    """Start the profiler (vLLM skips `skip_steps` engine steps, then records `steps`)."""
    if _section(spec) is None:
        return
    _started["t"] = time.perf_counter()
    llm.start_profile()


def stop(llm, spec: dict[str, Any]) -> None:
    """Stop the profiler (the traces are written now), drop any over max_mb, print the DSV4_PROFILE line."""
    section = _section(spec)
    if section is None:
        return
    llm.stop_profile()
    folder = Path(PROFILE_DIR).resolve()
    limit = int(section.get("max_mb", 1024)) << 20
    files, dropped = [], []
    for path in sorted(folder.rglob("*.pt.trace.json*")):
        if path.name.endswith(".tmp"):
            continue
        size = path.stat().st_size
        if size > limit:
            path.unlink()
            dropped.append({"file": path.name, "bytes": size})
        else:
            files.append({"file": str(path.relative_to(folder)), "bytes": size})
    window = f"skip{section.get('skip_steps', 4)}+{section.get('steps', 8)}"
    print(MARKER + json.dumps({
        "dir": str(folder), "tool": "torch", "window": window, "files": files, "dropped": dropped,
        "seconds": round(time.perf_counter() - _started.get("t", time.perf_counter()), 3),
        "pid": os.getpid()}), flush=True)
