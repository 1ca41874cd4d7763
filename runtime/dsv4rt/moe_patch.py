"""DSV4_MOE_BACKEND=triton_w4a16: vLLM's MXFP4 emulation experts run through the W4A16 kernel (issue 28).

The entry point is vLLM's `OCP_MXQuantizationEmulationTritonExperts.apply` (vllm 0.32.0,
model_executor/layers/fused_moe/experts/ocp_mx_emulation_moe.py), which dequantizes every local expert to bf16 and
runs TritonExperts. The patched `apply` computes the same function with `moe_w4a16.mxfp4_moe` and writes `output`
when the call is one the kernel covers: weight-only MXFP4 (`w_mxfp4`, no activation fake-quant), bf16 activations
on a GPU (or Triton's interpreter), SiLU with vLLM's clamp (SwiGLU limit, alpha 1), no expert biases, no LoRA.
Anything else goes to the original emulation, said once per reason on stderr. The shim registers the patch; this
module imports only the stdlib until a patched call runs.
"""

from __future__ import annotations

import inspect
import os
import sys

TARGET_MODULE = "vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe"
TARGET_CLASS = "OCP_MXQuantizationEmulationTritonExperts"
# vLLM 0.32.0's signature of the patched method (after self); the patch refuses a class whose apply differs.
APPLY_PARAMS = ("output", "hidden_states", "w1", "w2", "topk_weights", "topk_ids", "activation",
                "global_num_experts", "expert_map", "a1q_scale", "a2_scale", "workspace13", "workspace2",
                "expert_tokens_meta", "apply_router_weight_on_input")
_SAID: set[str] = set()


def _fall_back(reason: str) -> None:
    if reason not in _SAID:
        _SAID.add(reason)
        print(f"[dsv4 shim] DSV4_MOE_BACKEND=triton_w4a16: emulation kept for this call ({reason})", file=sys.stderr,
              flush=True)


def unsupported(experts, call: dict) -> str | None:
    """Why the kernel cannot take this call (None: it can)."""
    import torch

    scheme = getattr(experts, "ocp_mx_scheme", None)
    if str(getattr(scheme, "value", scheme)) != "w_mxfp4":
        return f"scheme {scheme}, not weight-only w_mxfp4"
    if getattr(experts, "quant_dtype", None) is not None:
        return "activations are fake-quantized"
    x = call["hidden_states"]
    if x.dtype != torch.bfloat16:
        return f"activations are {x.dtype}, not bf16"
    if x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "CPU tensors (Triton runs them only in its interpreter)"
    if str(getattr(call["activation"], "value", call["activation"])) != "silu":
        return f"activation {call['activation']}, not SiLU"
    if getattr(experts, "w1_bias", None) is not None or getattr(experts, "w2_bias", None) is not None:
        return "expert biases"
    if getattr(experts, "_lora_context", None) is not None:
        return "LoRA"
    return None


def kernel_apply(experts, call: dict) -> bool:
    """Compute the call with the kernel into call['output']; False (nothing written) when it cannot."""
    import torch

    from .moe_w4a16 import mxfp4_moe

    reason = unsupported(experts, call)
    if reason is not None:
        _fall_back(reason)
        return False
    ids, expert_map = call["topk_ids"], call["expert_map"]
    if expert_map is not None:  # global ids -> this rank's experts, -1 for the others (the kernel skips them)
        ids = expert_map[ids.long()]
    weights = call["topk_weights"]
    if call["apply_router_weight_on_input"]:  # already folded into hidden_states by vLLM's prepare step
        weights = torch.ones_like(weights)
    config = getattr(experts, "activation_config", None)
    limit = getattr(config, "clamp_limit", None)
    try:
        y = mxfp4_moe(call["hidden_states"], call["w1"], experts.w1_scale_val, call["w2"], experts.w2_scale_val,
                      ids, weights, alpha=1.0, limit=limit)
    except ValueError as exc:  # shapes or dtypes the kernel does not take
        _fall_back(str(exc))
        return False
    call["output"].copy_(y.view(call["output"].shape))
    return True


def patch_emulation_experts(module) -> str | None:
    """The shim's patch for TARGET_MODULE: wrap the class's apply (guarded by its signature, idempotent)."""
    from .patchmark import mark as _mark

    if os.environ.get("DSV4_MOE_BACKEND") != "triton_w4a16":  # emulation, native, auto: vLLM's own choice
        return None
    cls = getattr(module, TARGET_CLASS, None)
    original = getattr(cls, "apply", None)
    if original is None:
        return None
    params = tuple(inspect.signature(original).parameters)[1:]
    if params != APPLY_PARAMS:
        print(f"[dsv4 shim] DSV4_MOE_BACKEND=triton_w4a16 not applied: {TARGET_CLASS}.apply{params} is not the "
              f"signature it was written for", file=sys.stderr, flush=True)
        return None
    if not _mark(cls, "moe_w4a16"):
        return None
    signature = inspect.signature(original)

    def apply(self, *args, **kwargs):
        call = signature.bind(self, *args, **kwargs).arguments
        if not kernel_apply(self, call):
            return original(self, *args, **kwargs)
        return None

    apply.__doc__ = original.__doc__
    cls.apply = apply
    return f"DSV4_MOE_BACKEND=triton_w4a16: {TARGET_CLASS}.apply -> dsv4rt.moe_w4a16.mxfp4_moe (pid {os.getpid()})"
