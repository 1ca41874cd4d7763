"""Reference writer and reader of DeepSeek V4's block-packed `fp8_ds_mla` KV cache (report §7; torch only).

One token is 512 values: 448 NoPE (stored as FP8 E4M3 with one UE8M0 scale per 64 values) and 64 RoPE (stored as
BF16). The cache tensor is a uint8 view of *logical* shape [num_blocks, block_size, 584] — but that shape is for
sizing only. The physical layout of one block, at byte offset block * stride(0), is

    [block_size x 576 data bytes: 448 FP8 NoPE + 128 BF16 RoPE per token][block_size x 8 scale bytes]

so token `pos` has its data at  block_base + pos * 576  and its 7 scale bytes (+1 zero pad byte) at
block_base + block_size * 576 + pos * 8.  stride(0) may exceed block_size * 584 (the allocator pads blocks and
shares buffers; the report saw 1,002,240): readers must keep it, and never `.contiguous()` the view.
"""

from __future__ import annotations

import torch

TOKEN_DATA_BYTES = 576  # 448 FP8 NoPE bytes + 64 BF16 RoPE values
NOPE_DIM = 448
ROPE_DIM = 64
SCALE_BYTES = 8  # 7 UE8M0 scales (one per 64 NoPE values) + 1 pad byte
GROUP = 64
LOGICAL_TOKEN_BYTES = TOKEN_DATA_BYTES + SCALE_BYTES  # 584


def fp8_dtype(fnuz: bool) -> torch.dtype:
    """OCP E4M3 (bias 7, max 448) or AMD's FNUZ variant (bias 8, max 240, no negative zero)."""
    return torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn


def fp8_max(fnuz: bool) -> float:
    return 240.0 if fnuz else 448.0


def block_bytes(cache: torch.Tensor, block_size: int) -> torch.Tensor:
    """A [num_blocks, block_size * 584] byte view that keeps the cache's real block stride."""
    if cache.dtype != torch.uint8:
        raise TypeError(f"the cache must be a uint8 view, got {cache.dtype}")
    if cache.dim() != 3 or cache.shape[1] != block_size or cache.shape[2] != LOGICAL_TOKEN_BYTES:
        raise ValueError(f"expected a [num_blocks, {block_size}, {LOGICAL_TOKEN_BYTES}] view, got {tuple(cache.shape)}")
    if cache.stride(1) != LOGICAL_TOKEN_BYTES or cache.stride(2) != 1:
        raise ValueError(f"a block must be contiguous inside (stride {cache.stride()})")
    return cache.as_strided((cache.shape[0], block_size * LOGICAL_TOKEN_BYTES), (cache.stride(0), 1))


def quantize(k: torch.Tensor, fnuz: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """k float [n, 512] -> (data bytes [n, 576], scale bytes [n, 8]) exactly as vLLM's writer: K rounded to bf16;
    per 64 NoPE values absmax = max(|x|, 1e-4), e = ceil(log2(absmax / fp8_max)), stored clamp(x * 2^-e) as E4M3
    (saturating), scale byte clamp(e + 127, 0, 255), pad byte 0."""
    if k.dim() != 2 or k.shape[1] != NOPE_DIM + ROPE_DIM:
        raise ValueError(f"k must be [n, {NOPE_DIM + ROPE_DIM}], got {tuple(k.shape)}")
    n = k.shape[0]
    kb = k.to(torch.bfloat16).float()
    nope = kb[:, :NOPE_DIM].reshape(n, NOPE_DIM // GROUP, GROUP)
    absmax = nope.abs().amax(dim=-1).clamp(min=1e-4)
    exponent = torch.ceil(torch.log2(absmax / fp8_max(fnuz)))
    scaled = nope * torch.exp2(-exponent)[..., None]  # a power of two: exact in float32
    limit = fp8_max(fnuz)
    q = scaled.clamp(-limit, limit).to(fp8_dtype(fnuz)).view(torch.uint8).reshape(n, NOPE_DIM)
    rope = kb[:, NOPE_DIM:].to(torch.bfloat16).contiguous().view(torch.uint8).reshape(n, 2 * ROPE_DIM)
    scale = torch.zeros(n, SCALE_BYTES, dtype=torch.uint8, device=k.device)
    scale[:, :NOPE_DIM // GROUP] = (exponent + 127).clamp(0, 255).to(torch.uint8)
    return torch.cat([q, rope], dim=1), scale


def _offsets(slots: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    slots = slots.to(torch.int64)
    block, pos = slots // block_size, slots % block_size
    arange_data = torch.arange(TOKEN_DATA_BYTES, device=slots.device)
    arange_scale = torch.arange(SCALE_BYTES, device=slots.device)
    data = pos[:, None] * TOKEN_DATA_BYTES + arange_data[None, :]
    scale = block_size * TOKEN_DATA_BYTES + pos[:, None] * SCALE_BYTES + arange_scale[None, :]
    return block, data, scale


def write_fp8_ds_mla(k: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor, block_size: int = 64,
                     fnuz: bool = False) -> None:
    """Quantise k [n, 512] and write it at `slots` (= block * block_size + position) of the block-packed cache."""
    raw = block_bytes(cache, block_size)
    data, scale = quantize(k, fnuz)
    block, data_at, scale_at = _offsets(slots.to(cache.device), block_size)
    raw[block[:, None], data_at] = data
    raw[block[:, None], scale_at] = scale


def ue8m0_to_f32(byte: torch.Tensor) -> torch.Tensor:
    """UE8M0 scale bytes -> 2**(byte - 127), exactly: the float32 whose exponent field is the byte (255 -> inf,
    0 -> the subnormal 2**-127). torch.exp2 is approximate on CUDA (ex2.approx), off by an ulp at small scales."""
    bits = byte.to(torch.int32) << 23
    bits = torch.where(byte == 0, torch.full_like(bits, 1 << 22), bits)
    return bits.view(torch.float32)


def dequantize(data: torch.Tensor, scale: torch.Tensor, fnuz: bool = False) -> torch.Tensor:
    """(data bytes [n, 576], scale bytes [n, 8]) -> float32 [n, 512]; NoPE value i uses scale byte i // 64."""
    n = data.shape[0]
    scales = ue8m0_to_f32(scale[:, :NOPE_DIM // GROUP])
    nope = data[:, :NOPE_DIM].contiguous().view(fp8_dtype(fnuz)).float()
    nope = nope * scales.repeat_interleave(GROUP, dim=1)
    rope = data[:, NOPE_DIM:].contiguous().view(torch.bfloat16).float().reshape(n, ROPE_DIM)
    return torch.cat([nope, rope], dim=1)


def read_fp8_ds_mla(cache: torch.Tensor, slots: torch.Tensor, block_size: int = 64,
                    fnuz: bool = False) -> torch.Tensor:
    """The reference reader: the same address formula as the writer, on a view that keeps stride(0)."""
    raw = block_bytes(cache, block_size)
    block, data_at, scale_at = _offsets(slots.to(cache.device), block_size)
    return dequantize(raw[block[:, None], data_at], raw[block[:, None], scale_at], fnuz)


def make_cache(num_blocks: int, block_size: int = 64, block_stride: int | None = None,
               device: str | torch.device = "cpu", fill: int | None = None) -> torch.Tensor:
    """A cache view like vLLM's: logical [num_blocks, block_size, 584] over blocks `block_stride` bytes apart
    (default: 64 x 584 padded up to a multiple of 576, as vLLM allocates). Padding bytes get `fill` (random if None)."""
    logical = block_size * LOGICAL_TOKEN_BYTES
    stride = block_stride or -(-logical // TOKEN_DATA_BYTES) * TOKEN_DATA_BYTES
    if stride < logical:
        raise ValueError(f"block stride {stride} is smaller than one block ({logical} bytes)")
    size = num_blocks * stride
    storage = (torch.randint(0, 256, (size,), dtype=torch.uint8, device=device) if fill is None
               else torch.full((size,), fill, dtype=torch.uint8, device=device))
    return storage.as_strided((num_blocks, block_size, LOGICAL_TOKEN_BYTES), (stride, LOGICAL_TOKEN_BYTES, 1))


# ---- the report's two wrong readers, kept as test doubles -------------------------------------------------------


def read_token_interleaved(cache: torch.Tensor, slots: torch.Tensor, block_size: int = 64,
                           fnuz: bool = False) -> torch.Tensor:
    """WRONG (J16): keeps the block stride but takes the logical shape for the layout: 584 bytes per token, scale
    right after each token's data. Reads other tokens' data as scales and garbage as RoPE."""
    slots = slots.to(torch.int64).to(cache.device)
    token = cache[slots // block_size, slots % block_size]
    return dequantize(token[:, :TOKEN_DATA_BYTES], token[:, TOKEN_DATA_BYTES:], fnuz)


def read_contiguous_first(cache: torch.Tensor, slots: torch.Tensor, block_size: int = 64,
                          fnuz: bool = False) -> torch.Tensor:
    """WRONG (the original, §7.3): `.contiguous()` first, then block-packed addressing with the cache's block
    stride — on the copy, whose blocks are now 584 x block_size apart, so every block after the first is read at
    the wrong place (and past the end, clamped here to stay in bounds)."""
    dense = cache.contiguous().view(-1)
    stride = cache.stride(0)
    slots = slots.to(torch.int64).to(cache.device)
    block, data_at, scale_at = _offsets(slots, block_size)
    base = (block * stride)[:, None]
    limit = dense.numel() - 1
    data = dense[(base + data_at).clamp(max=limit)]
    scale = dense[(base + scale_at).clamp(max=limit)]
    return dequantize(data, scale, fnuz)
