"""A Triton gather kernel for the block-packed fp8_ds_mla cache, with the reference reader's signature.

`read_fp8_ds_mla_triton(cache, slots, block_size=64, fnuz=False)` must equal `kvcache.read_fp8_ds_mla` bit for bit
(the reference stays as its oracle, report §15.4). One program reads TOKENS tokens: 448 E4M3 bytes decoded with
integer arithmetic (no FP8 type needed, so it also runs in Triton's CPU interpreter), 7 UE8M0 scales, 64 BF16 RoPE
values; same address formula as the writer; 64-bit offsets, the cache's own block stride.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .kvcache import LOGICAL_TOKEN_BYTES, NOPE_DIM, ROPE_DIM, TOKEN_DATA_BYTES

OUT_DIM = NOPE_DIM + ROPE_DIM


@triton.jit
def _pow2(e):
    """2**e for an integer e in [-149, 128], exact: built from float32 bits. (exp2 is not exact everywhere: the
    CPU interpreter's differs from torch's by an ulp near the float32 limits.)"""
    e = e.to(tl.int32)
    normal = (tl.maximum(e + 127, 0) << 23).to(tl.float32, bitcast=True)
    subnormal = (1 << tl.minimum(tl.maximum(e + 149, 0), 22)).to(tl.float32, bitcast=True)
    return tl.where(e >= -126, normal, subnormal)


@triton.jit
def _e4m3_to_f32(b, FNUZ: tl.constexpr):
    bits = b.to(tl.int32)
    sign = (bits >> 7) & 1
    exponent = (bits >> 3) & 0xF
    mantissa = (bits & 7).to(tl.float32)
    bias: tl.constexpr = 8 if FNUZ else 7
    normal = (1.0 + mantissa * 0.125) * _pow2(exponent - bias)
    subnormal = mantissa * 0.125 * _pow2(exponent * 0 + (1 - bias))
    magnitude = tl.where(exponent == 0, subnormal, normal)
    value = tl.where(sign == 1, -magnitude, magnitude)
    if FNUZ:
        is_nan = bits == 0x80  # FNUZ: the only NaN, and no negative zero
    else:
        is_nan = (bits & 0x7F) == 0x7F
    return tl.where(is_nan, float("nan"), value)


@triton.jit
def _gather_kernel(cache_ptr, slots_ptr, out_ptr, n_tokens, block_stride, BLOCK_SIZE: tl.constexpr,
                   FNUZ: tl.constexpr, TOKENS: tl.constexpr, ROPE16: tl.constexpr):
    offs = tl.arange(0, 512)
    is_nope = offs < 448
    rope_index = tl.where(is_nope, 0, offs - 448)
    for t in tl.static_range(TOKENS):
        token = tl.program_id(0) * TOKENS + t
        if token < n_tokens:
            slot = tl.load(slots_ptr + token).to(tl.int64)
            block = slot // BLOCK_SIZE
            pos = slot % BLOCK_SIZE
            block_base = cache_ptr + block * block_stride
            data = block_base + pos * 576
            # Scales sit after the block's data: block_base + BLOCK_SIZE * 576 + pos * 8.
            scale_byte = tl.load(block_base + BLOCK_SIZE * 576 + pos * 8 + offs // 64, mask=is_nope, other=127)
            nope = _e4m3_to_f32(tl.load(data + offs, mask=is_nope, other=0), FNUZ)
            nope = nope * _pow2(scale_byte.to(tl.int32) - 127)
            if ROPE16:  # 2-byte aligned: one 16-bit load per RoPE value
                half = tl.load((data + 448).to(tl.pointer_type(tl.uint16)) + rope_index, mask=~is_nope, other=0)
                rope = (half.to(tl.uint32) << 16).to(tl.float32, bitcast=True)  # bf16 -> f32 is a 16-bit shift
            else:
                lo = tl.load(data + 448 + 2 * rope_index, mask=~is_nope, other=0).to(tl.uint32)
                hi = tl.load(data + 449 + 2 * rope_index, mask=~is_nope, other=0).to(tl.uint32)
                rope = ((hi << 24) | (lo << 16)).to(tl.float32, bitcast=True)
            tl.store(out_ptr + token * 512 + offs, tl.where(is_nope, nope, rope))


def read_fp8_ds_mla_triton(cache: torch.Tensor, slots: torch.Tensor, block_size: int = 64,
                           fnuz: bool = False, tokens_per_program: int = 2, num_warps: int = 2) -> torch.Tensor:
    if cache.dtype != torch.uint8 or cache.dim() != 3 or cache.shape[2] != LOGICAL_TOKEN_BYTES:
        raise ValueError(f"expected a uint8 [num_blocks, {block_size}, {LOGICAL_TOKEN_BYTES}] cache view")
    if cache.stride(1) != LOGICAL_TOKEN_BYTES or cache.stride(2) != 1:
        raise ValueError("a block must be contiguous inside")
    assert TOKEN_DATA_BYTES == 576 and OUT_DIM == 512
    slots = slots.to(device=cache.device, dtype=torch.int64).contiguous()
    n = slots.numel()
    out = torch.empty((n, OUT_DIM), dtype=torch.float32, device=cache.device)
    if n:
        # The kernel addresses bytes from the view's first block: pass the view itself, not its storage.
        grid = (triton.cdiv(n, tokens_per_program),)
        aligned = cache.stride(0) % 2 == 0 and cache.data_ptr() % 2 == 0
        _gather_kernel[grid](cache, slots, out, n, cache.stride(0), BLOCK_SIZE=block_size, FNUZ=fnuz,
                             TOKENS=tokens_per_program, ROPE16=aligned, num_warps=num_warps)
    return out
