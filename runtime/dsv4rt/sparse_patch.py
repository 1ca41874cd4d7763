"""DSV4_SPARSE_KERNEL=fused|gather|reference: vLLM's ROCm sparse-MLA decode through this runtime's kernels.

The patch point is `rocm_sparse_attn_decode` in vllm.v1.attention.ops.rocm_aiter_mla_sparse (the module whose decode
the report fixed, §9.6; vLLM 0.32.0's signature: the DeepSeek V4/V4.1 ROCm attention calls it with keywords and
takes back how many leading rows it inverse-RoPE'd). The replacement decodes into vLLM's `output` with

  fused      sparse_decode.sparse_mla_decode (one Triton kernel, split-K),
  gather     the Triton gather kernel + torch attention (sparse_reference.gather_sparse_decode),
  reference  the reference reader + fp32 attention (sparse_reference.reference_sparse_decode),

and returns 0 rows rotated, so vLLM runs its own inverse RoPE pass over the output. The next choice in that order
is the fall-back: a path that raises (a Triton that cannot compile it, say) is announced on stderr and dropped for the
rest of the process. The MXFP8 output epilogue (gfx950 only) stays vLLM's. The SWA cache is read with the platform's
FP8 flavour and the compressed cache as OCP, as vLLM's own kernel does. Stdlib only at import: the shim imports this
module in every Python process, and torch/Triton load at the first decode.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys

SWITCH = "DSV4_SPARSE_KERNEL"
CHOICES = ("fused", "gather", "reference")
TARGET = "vllm.v1.attention.ops.rocm_aiter_mla_sparse"
CONSUMERS = ("vllm.models.deepseek_v4.amd.rocm", "vllm.models.deepseek_v41.amd.rocm")
FUNCTION = "rocm_sparse_attn_decode"
NEEDED = ("q", "kv_cache", "swa_k_cache", "swa_only", "topk_indices", "topk_lens", "swa_indices", "swa_lens",
          "swa_ragged_indices", "swa_ragged_indptr", "topk_ragged_indices", "topk_ragged_indptr", "attn_sink",
          "scale", "output")
MARK = "__dsv4_sparse_kernel__"


def announce(message: str) -> None:
    print(f"[dsv4 shim] {message}", file=sys.stderr, flush=True)


def _paths(choice: str) -> list[str]:
    return list(CHOICES[CHOICES.index(choice):])


def _decoder(name: str):
    if name == "fused":
        from .sparse_decode import sparse_mla_decode

        return sparse_mla_decode
    from . import sparse_reference

    return sparse_reference.gather_sparse_decode if name == "gather" else sparse_reference.reference_sparse_decode


@functools.lru_cache(maxsize=None)
def _platform_fnuz() -> bool:
    """The SWA cache's FP8 flavour, as vLLM's kernel reads it (current_platform.is_fp8_fnuz())."""
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_fp8_fnuz())
    except Exception:  # no vLLM platform (tests): OCP
        return False


def _segment(prefix: str, indices, lengths, ragged, indptr, batch) -> dict:
    """vLLM's ragged (indices, indptr) when it passed them, else its dense rows with their lengths."""
    if ragged is not None and indptr is not None:
        return {f"{prefix}indices": ragged, f"{prefix}indptr": indptr}
    return {f"{prefix}indices": indices.reshape(batch, -1), f"{prefix}lengths": lengths}


def kernel_arguments(call: dict) -> dict:
    """sparse_mla_decode's keywords from a bound rocm_sparse_attn_decode call."""
    q = call["q"]
    batch = q.shape[0]
    main = _segment("", call["swa_indices"], call["swa_lens"], call["swa_ragged_indices"],
                    call["swa_ragged_indptr"], batch)
    args = {"q": q, "cache": call["swa_k_cache"], "softmax_scale": call["scale"], "fnuz": _platform_fnuz(),
            "attn_sink": None if call["attn_sink"] is None else call["attn_sink"][: q.shape[1]], **main}
    if not call["swa_only"]:
        args["extra_cache"] = call["kv_cache"]
        args.update(_segment("extra_", call["topk_indices"], call["topk_lens"], call["topk_ragged_indices"],
                             call["topk_ragged_indptr"], batch))
    return args


def make_decode(original, choice: str):
    """rocm_sparse_attn_decode with vLLM's signature, decoding through `choice` (and its fall-backs)."""
    signature = inspect.signature(original)
    paths = _paths(choice)

    @functools.wraps(original)
    def rocm_sparse_attn_decode(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        output = call["output"]
        if call.get("output_mxfp8") is not None or output is None:
            return original(*args, **kwargs)
        decode_args = kernel_arguments(call)
        q = decode_args["q"]
        direct = output.shape == q.shape and output.stride(-1) == 1
        while True:
            try:
                out, _ = _decoder(paths[0])(**decode_args, out=output if direct else None)
                break
            except Exception as exc:
                if len(paths) == 1:
                    raise
                announce(f"{SWITCH}: the {paths[0]} sparse decode failed ({exc!r}); falling back to {paths[1]} "
                         f"(pid {os.getpid()})")
                paths.pop(0)
        if not direct:
            output.copy_(out.to(output.dtype))
        return 0  # no rows inverse-RoPE'd here: vLLM's caller runs its own pass

    setattr(rocm_sparse_attn_decode, MARK, choice)
    rocm_sparse_attn_decode.dsv4_paths = paths  # the live fall-back list (tests and logs read it)
    return rocm_sparse_attn_decode


def patch_sparse_decode(module) -> str | None:
    """The shim's patch for TARGET: refuses (raises, which the shim logs) an unknown choice or a signature without
    the arguments it reads; idempotent."""
    choice = os.environ.get(SWITCH, "")
    if choice not in CHOICES:
        raise ValueError(f"{SWITCH}={choice!r} is not one of {'|'.join(CHOICES)}: vLLM's own sparse decode kept")
    original = getattr(module, FUNCTION, None)
    if original is None:
        raise AttributeError(f"{module.__name__} has no {FUNCTION}: {SWITCH}={choice} not applied")
    if getattr(original, MARK, None):
        return None
    missing = [name for name in NEEDED if name not in inspect.signature(original).parameters]
    if missing:
        raise TypeError(f"{module.__name__}.{FUNCTION} lacks {', '.join(missing)} (not vLLM 0.32's signature): "
                        f"{SWITCH}={choice} not applied")
    setattr(module, FUNCTION, make_decode(original, choice))
    return (f"{SWITCH}={choice}: {module.__name__}.{FUNCTION} -> dsv4rt {' -> '.join(_paths(choice))} "
            f"(pid {os.getpid()})")


def patch_sparse_decode_consumer(module) -> str | None:
    """A module that imported the name before the patch (only when vLLM's ops module was loaded before the shim):
    rebind it to the patched function."""
    target = sys.modules.get(TARGET)
    patched = getattr(target, FUNCTION, None)
    current = getattr(module, FUNCTION, None)
    if current is None or patched is None or not getattr(patched, MARK, None) or current is patched:
        return None
    setattr(module, FUNCTION, patched)
    return f"{SWITCH}: {module.__name__}.{FUNCTION} rebound to the patched decode"
