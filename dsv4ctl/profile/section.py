"""The `profile:` section of a spec: profile a window of steady decode steps with torch's profiler, through
vLLM's profiler config (vLLM >= 0.13: `profiler_config={"profiler": "torch", "torch_profiler_dir": ...,
"delay_iterations": skip_steps, "max_iterations": steps, ...}`), never the whole run. The traces land per rank
in `<run dir>/profile/` beside raw.log; the probe prints where (`DSV4_PROFILE {...}`), and the run is judged for
correctness like any other.

`tool: rocprofv3` or `tool: hipprof` wraps the probe in that kernel tracer instead (the ROCm and DTK tracers trace
the whole process and its children, so the window is the whole run, and torch's profiler stays off); the job
script checks the tracer is on PATH (a setup error naming it, before the engine starts), writes its output into
`<run dir>/profile/` and prints the DSV4_PROFILE line when the tracer has written its files."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

Int = Annotated[int, Strict()]
MAX_PROFILE_STEPS = 10_000  # engine steps in one window (a decode step of TP 8 writes ~1 MB of trace)
MAX_SKIP_STEPS = 1_000_000


class ProfileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tool: Literal["torch", "rocprofv3", "hipprof"] = Field(
        "torch", description="torch: vLLM's torch profiler (CPU ops, and device kernels on a GPU or DCU), for a "
                             "window of steps; rocprofv3 (ROCm) or hipprof (DTK): the kernel tracer wrapped around "
                             "the job, the whole run.")
    skip_steps: Int = Field(4, ge=0, le=MAX_SKIP_STEPS, description="Engine steps left out after the profiler "
                                                                   "starts (warm-up, prefill).")
    steps: Int = Field(8, ge=1, le=MAX_PROFILE_STEPS, description="Engine steps profiled after those.")
    with_stack: bool = Field(True, description="Python frames, so kernels are attributed to nn.Modules.")
    record_shapes: bool = False
    max_mb: Int = Field(1024, ge=1, le=1 << 20, description="A trace file larger than this (MiB) is removed "
                                                            "after the run, and the probe says so.")

    @model_validator(mode="after")
    def _torch_only_fields(self) -> "ProfileSpec":
        # By value, not by the keys given: a stored spec's snapshot carries every field at its default.
        given = sorted(f for f in TORCH_ONLY if getattr(self, f) != type(self).model_fields[f].default)
        if self.tool != "torch" and given:
            raise ValueError(f"{', '.join(given)}: torch's profiler only; {self.tool} traces the whole run "
                             "(leave them out, or use tool: torch for a window of steps)")
        return self

    def window(self) -> str:
        """The window's name in the store: `skip4+8` (4 steps left out, 8 profiled); `run` for a kernel tracer."""
        return "run" if self.tool != "torch" else f"skip{self.skip_steps}+{self.steps}"

    def tracer(self) -> tuple[str, ...]:
        """The kernel tracer's command line put before the probe's (none for torch). Output goes to ./profile/
        (the job's directory): rocprofv3 as CSV (`<host>/<pid>_kernel_trace.csv`, one per process, and its
        `<pid>_memory_copy_trace.csv`), hipprof as
        rocprof v1 does with `--hip-trace` (`hipprof_results.json`, chrome-tracing JSON)."""
        return TRACERS.get(self.tool, ())


TORCH_ONLY = frozenset({"skip_steps", "steps", "with_stack", "record_shapes"})
# One place for each tracer's command line (kept to flags both the ROCm 6.x and 7.x rocprofv3 take; `csv`, because
# from ROCm 7 the default output is rocpd SQLite, which dsv4ctl does not read).
TRACERS: dict[str, tuple[str, ...]] = {
    "rocprofv3": ("rocprofv3", "--kernel-trace", "--memory-copy-trace", "--output-format", "csv",
                  "--output-directory", "profile", "--"),
    "hipprof": ("hipprof", "--hip-trace", "-d", "profile", "-o", "profile/hipprof_results.csv"),
}
