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
    """The spec's `profile:` section when it asks for torch's profiler (a kernel tracer wraps the job instead)."""
    section = spec.get("profile")
    if not isinstance(section, dict) or section.get("tool", "torch") != "torch":
        return None
    return section


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
    window = f"skip{section.get('skip_steps', 4)}+{section.get('steps', 8)}"
    _report("torch", window, int(section.get("max_mb", 1024)),
            {"seconds": round(time.perf_counter() - _started.get("t", time.perf_counter()), 3), "pid": os.getpid()})


# The trace files dsv4ctl reads (dsv4ctl/profile/sources.py TRACE_GLOBS): torch's, rocprofv3's CSV
# (`<host>/<pid>_kernel_trace.csv`), hipprof's JSON (`hipprof_results.json`). ./profile/ holds one tool's output.
TRACE_FILES = ("*.pt.trace.json*", "*kernel_trace.csv", "*memory_copy_trace.csv", "*_results.json")


def _report(tool: str, window: str, max_mb: int, extra: dict[str, Any]) -> None:
    """Drop trace files over max_mb, then print the DSV4_PROFILE line naming the folder and the files kept."""
    folder = Path(PROFILE_DIR).resolve()
    limit = max_mb << 20
    files, dropped = [], []
    found = sorted({p for pattern in TRACE_FILES for p in folder.rglob(pattern)}) if folder.is_dir() else []
    for path in found:
        if path.name.endswith(".tmp") or not path.is_file():
            continue
        size = path.stat().st_size
        if size > limit:
            path.unlink()
            dropped.append({"file": path.name, "bytes": size})
        else:
            files.append({"file": str(path.relative_to(folder)), "bytes": size})
    print(MARKER + json.dumps({"dir": str(folder), "tool": tool, "window": window, "files": files,
                               "dropped": dropped, **extra}), flush=True)


def after_tracer(spec_path: str, tracer_exit: int) -> None:
    """Run by the job script once a kernel tracer wrapped around the probe has exited (its files are written
    then, not before): the DSV4_PROFILE line, with the tracer's exit code."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    section = spec.get("profile") or {}
    _report(str(section.get("tool", "")), "run", int(section.get("max_mb", 1024)), {"exit": tracer_exit})


if __name__ == "__main__":  # job.sh: python -m dsv4rt.profiling spec.json <the tracer's exit code>
    import sys

    after_tracer(sys.argv[1], int(sys.argv[2]))
