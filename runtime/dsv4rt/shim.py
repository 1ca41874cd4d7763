"""The gfx936 compatibility shim.

Gating: it applies only on ROCm gfx936 (read from the KFD topology, no imports) or when DSV4_SHIM=1, and never on
CUDA or CPU otherwise. Switch patches are the exception: each applies on any platform where its own switch is 1
(DSV4_NATIVE_ROPE; DSV4_SPARSE_KERNEL when set to any value), and says so on stderr whatever DSV4_SHIM_DEBUG is, since it changes the numbers. Each patch is
guarded (it checks that its target exists and still needs it) and idempotent (a marker on the target). Patches of a
module (Triton, vLLM) wait for that module's own import, through an import hook: the shim never imports Triton at
start-up (report §9.1). DSV4_SHIM_DEBUG=1 logs what was patched.
"""

from __future__ import annotations

import glob
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable

from .moe_patch import TARGET_MODULE as MOE_TARGET, patch_emulation_experts
from .sparse_patch import CONSUMERS, TARGET, patch_sparse_decode, patch_sparse_decode_consumer

GFX936_TARGET_VERSION = "90306"  # gfx9.3.6 in /sys/class/kfd/kfd/topology/nodes/*/properties
from .patchmark import MARK, mark as _mark  # noqa: F401  (MARK: read by tests and the probe)
APPLIED: list[str] = []


def log(message: str, always: bool = False) -> None:
    if always or os.environ.get("DSV4_SHIM_DEBUG") == "1":
        print(f"[dsv4 shim] {message}", file=sys.stderr, flush=True)


def on_gfx936(topology: str = "/sys/class/kfd/kfd/topology/nodes") -> bool:
    if os.environ.get("DSV4_GFX_ARCH"):
        return os.environ["DSV4_GFX_ARCH"] == "gfx936"
    for path in glob.glob(f"{topology}/*/properties"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("gfx_target_version") and line.split()[-1] == GFX936_TARGET_VERSION:
                        return True
        except OSError:
            continue
    return False


def enabled() -> bool:
    forced = os.environ.get("DSV4_SHIM")
    if forced == "1":
        return True
    if forced == "0" and not on_gfx936():
        return False
    return on_gfx936()


# ---- patches ------------------------------------------------------------------------------------------------------




def patch_skinny_gemm_default() -> str | None:
    """J06: wvSplitK_hf_sml_ hit a device-side assertion on gfx936; off unless the spec turns it on."""
    if "VLLM_ROCM_USE_SKINNY_GEMM" in os.environ:
        return None
    os.environ["VLLM_ROCM_USE_SKINNY_GEMM"] = "0"
    return "VLLM_ROCM_USE_SKINNY_GEMM defaults to 0"


def patch_triton_reduce_or(tl) -> str | None:
    """Backport tl.reduce_or where DAS Triton lacks it."""
    if hasattr(tl, "reduce_or") or not _mark(tl, "reduce_or"):
        return None
    import triton

    @triton.jit
    def _or(a, b):
        return a | b

    @triton.jit
    def reduce_or(input, axis):
        return tl.reduce(input, axis, _or)

    tl.reduce_or = reduce_or
    return "triton.language.reduce_or backported"


def patch_triton_softmax_dim(tl) -> str | None:
    """J02-J05: `softmax() got an unexpected keyword argument 'dim'` — accept `dim` as the axis."""
    import inspect

    softmax = getattr(tl, "softmax", None)
    if softmax is None or not _mark(tl, "softmax_dim"):
        return None
    fn = getattr(softmax, "fn", softmax)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if "dim" in params:
        return None
    original = softmax

    def softmax_with_dim(x, ieee_rounding=False, dim=None, _builder=None, **kwargs):
        # Triton's softmax works on the last axis; dim must be that axis (or None).
        return original(x, ieee_rounding, _builder=_builder, **kwargs)

    for attr in ("__name__", "__doc__"):
        setattr(softmax_with_dim, attr, getattr(original, attr, None))
    softmax_with_dim.__triton_builtin__ = getattr(original, "__triton_builtin__", True)
    tl.softmax = softmax_with_dim
    return "triton.language.softmax accepts dim="


def patch_native_rope(base) -> str | None:
    """DSV4_NATIVE_ROPE: vLLM CPU 0.32.0's C++ rotary_embedding op mis-rotates MLA's 3-D q_pe/k_pe views (the tiny
    DeepSeek's layer 0 at cosine 0.998 against transformers, docs/alignment.md); PyTorch's forward_native is exact."""
    rope = getattr(base, "RotaryEmbedding", None)
    if rope is None or not hasattr(rope, "forward_native") or not _mark(rope, "native_rope"):
        return None

    def forward_cpu(self, *args, **kwargs):
        # Through self, so a subclass with its own forward_native keeps it (CustomOp's own CPU fallback does this).
        return self.forward_native(*args, **kwargs)

    rope.forward_cpu = forward_cpu
    return f"DSV4_NATIVE_ROPE=1: {base.__name__}.RotaryEmbedding.forward_cpu -> forward_native (pid {os.getpid()})"


ModulePatch = Callable[[object], str | None]
STARTUP_PATCHES: tuple[Callable[[], str | None], ...] = (patch_skinny_gemm_default,)
MODULE_PATCHES: dict[str, tuple[ModulePatch, ...]] = {
    "triton.language": (patch_triton_reduce_or, patch_triton_softmax_dim),
}
# Patches a switch turns on, on any platform. The rope classes are built (and bind forward_cpu) only when the model
# is, after this module is imported, so patching at import time reaches every engine process that loads the model.
SWITCH_PATCHES: dict[str, dict[str, tuple[ModulePatch, ...]]] = {
    "DSV4_NATIVE_ROPE": {"vllm.model_executor.layers.rotary_embedding.base": (patch_native_rope,)},
    "DSV4_SPARSE_KERNEL": {TARGET: (patch_sparse_decode,), **{c: (patch_sparse_decode_consumer,) for c in CONSUMERS}},
    "DSV4_MOE_BACKEND": {MOE_TARGET: (patch_emulation_experts,)},  # acts on triton_w4a16 only
}
# On when set at all; the patch refuses an unknown value loudly (DSV4_MOE_BACKEND's ignores vLLM's own choices).
CHOICE_SWITCHES = frozenset({"DSV4_SPARSE_KERNEL", "DSV4_MOE_BACKEND"})
LOUD = frozenset(p for table in SWITCH_PATCHES.values() for patches in table.values() for p in patches)
ACTIVE: dict[str, tuple[ModulePatch, ...]] = {}


def active_patches(gfx936: bool) -> dict[str, tuple[ModulePatch, ...]]:
    """The module patches this process applies: the gfx936 ones where the shim is on, each switch's where it is 1."""
    table = dict(MODULE_PATCHES) if gfx936 else {}
    for switch, patches in SWITCH_PATCHES.items():
        if os.environ.get(switch) == "1" or (switch in CHOICE_SWITCHES and os.environ.get(switch)):
            for name, more in patches.items():
                table[name] = table.get(name, ()) + more
    return table


def apply_module_patches(name: str, module: object) -> None:
    for patch in ACTIVE.get(name, ()):
        try:
            done = patch(module)
        except Exception as exc:  # one broken patch must not take the others (or the import) down
            log(f"{patch.__name__} failed: {exc!r}", always=patch in LOUD)
            continue
        if done:
            APPLIED.append(done)
            log(done, always=patch in LOUD)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of a patched module so its patches run right after the module executes."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in ACTIVE:
            return None
        sys.meta_path.remove(self)  # find the real spec without recursing into ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            apply_module_patches(fullname, module)

        loader.exec_module = exec_and_patch
        return spec


_HOOK: _PatchOnImport | None = None


def install() -> bool:
    """Apply start-up patches and arm the import hook; a no-op off gfx936 (unless DSV4_SHIM=1) where no switch
    patch is asked for. True when something was armed."""
    global _HOOK, ACTIVE
    if _HOOK is not None:
        return True
    gfx936 = enabled()
    ACTIVE = active_patches(gfx936)
    if not gfx936 and not ACTIVE:
        return False
    if gfx936:
        for patch in STARTUP_PATCHES:
            done = patch()
            if done:
                APPLIED.append(done)
                log(done)
    _HOOK = _PatchOnImport()
    sys.meta_path.insert(0, _HOOK)
    for name in ACTIVE:  # already imported before us (rare): patch in place
        if name in sys.modules:
            apply_module_patches(name, sys.modules[name])
    log("installed")
    return True
