"""The registry of known environment switches of the gfx936 port.

Every `DSV4_*` / `VLLM_*` switch named in the port report is listed here with its type, its default and one line
of meaning. The defaults of the behaviour switches are the report's current stable set (§0.4). A spec may only set
names from this registry under `switches:`; anything else goes under `environment.env`, the explicit escape hatch.

Switches whose value follows from a typed spec field (TP size, max length, KV dtype, MoE backend...) are `derived`:
the renderer exports them from that field, and setting them by hand is refused so the two can never disagree.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

SwitchKind = Literal["flag", "choice", "text"]
SwitchRole = Literal["stable", "debug", "derived", "test"]


@dataclass(frozen=True)
class Switch:
    name: str
    kind: SwitchKind
    default: str | None
    meaning: str
    role: SwitchRole = "stable"
    choices: tuple[str, ...] = ()
    derived_from: str | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def normalise(self, value: object) -> str:
        """Return the value as the exact string exported to the job, or raise ValueError saying why not."""
        if self.kind == "flag":
            if isinstance(value, bool):
                return "1" if value else "0"
            if isinstance(value, int) and value in (0, 1):
                return str(value)
            if isinstance(value, str) and value in ("0", "1"):
                return value
            raise ValueError(f"{self.name} is a flag: use 0 or 1 (got {value!r})")
        if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
            raise ValueError(f"{self.name} takes a {self.kind} value (got {value!r})")
        text = str(value)
        if self.kind == "choice" and text not in self.choices:
            raise ValueError(f"{self.name} must be one of {', '.join(self.choices)} (got {text!r})")
        return text


SWITCHES: tuple[Switch, ...] = (
    # The report's stable set (§0.4).
    Switch("DSV4_USE_TRITON_SPARSE", "flag", "1",
           "Sparse MLA decode through the gfx936 Triton manual OCP E4M3 kernel instead of the PyTorch reference.",
           source="§0.1, §0.4"),
    Switch("DSV4_MOE_ROUTING_Q1", "flag", "1",
           "M=1 MoE routing Q1 path; bit-exact, and turning it off took fixed generation from 67.9 s to 101.3 s.",
           source="§0.1, §0.2, §0.4"),
    Switch("DSV4_FP8_WEIGHT_CACHE", "flag", "0",
           "Cache dequantised FP8 trunk weights between steps (off in the stable set).", source="§0.4"),
    Switch("DSV4_FP8_TRITON_GEMM", "flag", "0",
           "FP8 trunk GEMM through Triton instead of BF16 software dequantisation (off in the stable set).",
           source="§0.4, §9.2"),
    Switch("DSV4_ROCM_SHARED_EXPERTS_STREAM", "flag", "0",
           "Run shared experts on an auxiliary stream; regressed end to end and was dropped.", source="§0.2, §0.4"),
    Switch("DSV4_GREEDY_LOCAL_ARGMAX", "flag", "0",
           "Greedy sampling by a local argmax per rank (off in the stable set).", source="§0.4"),
    Switch("DSV4_MOE_Q1_PREPARE", "flag", "0",
           "Prepare Q1 routing buffers ahead of the MoE call (off in the stable set).", source="§0.4"),
    Switch("VLLM_ROCM_USE_SKINNY_GEMM", "flag", "0",
           "vLLM's ROCm skinny GEMM; on gfx936 wvSplitK_hf_sml_ hit a device-side assertion and VMFault (J06).",
           source="§0.4, §6.4, §9.5"),
    # Debugging and validation switches: off unless a run asks for them.
    Switch("DSV4_SHIM", "flag", "0",
           "Force the gfx936 compatibility shim on even where the platform is not detected as ROCm gfx936.",
           role="debug", source="§9.1"),
    Switch("DSV4_SHIM_DEBUG", "flag", "0", "Log each patch the gfx936 shim applies.", role="debug", source="§3"),
    Switch("DSV4_SPARSE_DEBUG", "flag", "0",
           "Print Sparse MLA decode diagnostics ([DSV4_DIAG] lines) for the real request, not the warm-up.",
           role="debug", source="§3, §6.10"),
    Switch("DSV4_SPARSE_VALIDATE", "flag", "0",
           "Turn the finite checks on K NoPE/RoPE, logits and probs into assertions.", role="debug", source="§15.2"),
    # No exported default (absent is off): a default would add a line to every rendered job script.
    Switch("DSV4_NATIVE_ROPE", "flag", None,
           "Off unless set. Rotary embedding through vLLM's PyTorch forward_native instead of the CPU C++ op, which "
           "mis-rotates MLA's 3-D q_pe/k_pe (tiny DeepSeek layer 0 at cosine 0.998 vs transformers, 1.0 with it; "
           "docs/alignment.md).",
           role="debug", source="docs/alignment.md"),
    Switch("DSV4_SPARSE_KERNEL", "choice", None,
           "Off unless set. vLLM's ROCm sparse-MLA decode through the runtime's fused Triton kernel, the Triton gather "
           "+ torch attention, or the reference reader + fp32 attention (each falls back to the next; "
           "docs/kernels.md).",
           choices=("fused", "gather", "reference"), source="issue 27, §15.4"),
    Switch("VLLM_CUDART_SO_PATH", "text", None,
           "Path of the CUDA runtime library vLLM's shutdown path looks for (the libcudart noise at exit).",
           role="debug", source="§11.2"),
    # Derived from typed spec fields: exported by the renderer, never set by hand.
    Switch("DSV4_TP", "text", None, "Tensor parallel size.", role="derived", derived_from="parallel.tp",
           source="§3"),
    Switch("DSV4_MAXLEN", "text", None, "max_model_len.", role="derived", derived_from="model.max_model_len",
           source="§3"),
    Switch("DSV4_MEMUTIL", "text", None, "gpu_memory_utilization.", role="derived",
           derived_from="model.gpu_memory_utilization", source="§3"),
    Switch("DSV4_KV_CACHE_DTYPE", "text", None, "KV cache dtype (fp8 for fp8_ds_mla).", role="derived",
           derived_from="model.kv_cache_dtype", source="§3, §6.8"),
    Switch("DSV4_MOE_BACKEND", "choice", "emulation", "MoE expert backend (MXFP4 emulation on gfx936; "
           "triton_w4a16: the shim runs vLLM's emulation experts through the W4A16 Triton kernel, docs/kernels.md).",
           role="derived", derived_from="model.moe_backend", choices=("emulation", "native", "auto", "triton_w4a16"),
           source="§0.4, §9.3, issue 28"),
)

BY_NAME: dict[str, Switch] = {s.name: s for s in SWITCHES}


def closest(name: str, n: int = 3) -> list[str]:
    """Known switch names closest to a misspelt one, best first."""
    settable = [s.name for s in SWITCHES if s.role != "derived"]
    return difflib.get_close_matches(name.upper(), settable, n=n, cutoff=0.5)


def defaults() -> dict[str, str]:
    """The stable set: every settable switch with a default, as exported to a job."""
    return {s.name: s.default for s in SWITCHES if s.role in ("stable", "debug") and s.default is not None}
