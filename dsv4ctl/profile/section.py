"""The `profile:` section of a spec: profile a window of steady decode steps with torch's profiler, through
vLLM's profiler config (vLLM >= 0.13: `profiler_config={"profiler": "torch", "torch_profiler_dir": ...,
"delay_iterations": skip_steps, "max_iterations": steps, ...}`), never the whole run. The traces land per rank
in `<run dir>/profile/` beside raw.log; the probe prints where (`DSV4_PROFILE {...}`), and the run is judged for
correctness like any other. rocprofv3 / hipprof wrapped around the job are not run by dsv4ctl yet: their output
files are read by `dsv4ctl profile FILE`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

Int = Annotated[int, Strict()]
MAX_PROFILE_STEPS = 10_000  # engine steps in one window (a decode step of TP 8 writes ~1 MB of trace)
MAX_SKIP_STEPS = 1_000_000


class ProfileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    tool: Literal["torch"] = Field("torch", description="torch: vLLM's torch profiler (CPU ops, and device "
                                                        "kernels on a GPU or DCU).")
    skip_steps: Int = Field(4, ge=0, le=MAX_SKIP_STEPS, description="Engine steps left out after the profiler "
                                                                   "starts (warm-up, prefill).")
    steps: Int = Field(8, ge=1, le=MAX_PROFILE_STEPS, description="Engine steps profiled after those.")
    with_stack: bool = Field(True, description="Python frames, so kernels are attributed to nn.Modules.")
    record_shapes: bool = False
    max_mb: Int = Field(1024, ge=1, le=1 << 20, description="A trace file larger than this (MiB) is removed "
                                                            "after the run, and the probe says so.")

    def window(self) -> str:
        """The window's name in the store: `skip4+8` (4 steps left out, 8 profiled)."""
        return f"skip{self.skip_steps}+{self.steps}"
