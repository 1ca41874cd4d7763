"""DeepSeek V4's sparse-MLA decode as one fused Triton kernel over the block-packed fp8_ds_mla cache (issue 27).

    sparse_mla_decode(q, cache, indices, extra_cache=..., extra_indices=..., softmax_scale=..., attn_sink=...)
        -> (out [B, H, 512], lse [B, H] float32)

FlashMLA's semantics: per query, softmax(q . k * softmax_scale) over the selected latents of both segments (the
sliding window in `cache`, the compressed tokens in `extra_cache`), each latent both key and value; lse is the natural
log-sum-exp of the scaled scores; a sink scales out by exp(lse) / (exp(lse) + exp(sink)) and leaves lse alone; a query
with no valid slot gets out 0 and lse +inf. A slot is `block * block_size + pos`; -1 (or any slot outside the cache)
is skipped; a slot listed twice counts twice.

One pass: a program takes one query, all its heads (up to 64) and a share of its selected tokens (split-K), decodes
each token's 448 E4M3 bytes, 7 UE8M0 scales and 64 BF16 RoPE values once, runs both products on the tensor cores in
bf16 with fp32 accumulation, and keeps an online softmax in fp32; a second kernel merges the splits (with one split the
first kernel finishes the job itself). Only what a gfx936 Triton lowers: E4M3 decoded with integer arithmetic into an
FP16 bit pattern (no FP8 dtype, no dot_scaled), bf16 `tl.dot`, no runtime if/else; OCP and FNUZ by a constexpr. The
decoded latent equals the reference reader's value exactly (an E4M3 value times a power of two fits bf16), so the
only approximation is the bf16 rounding of the softmax weights before the second product.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from .kvcache import LOGICAL_TOKEN_BYTES, NOPE_DIM, ROPE_DIM
from .kvcache_triton import _pow2

LATENT = NOPE_DIM + ROPE_DIM  # 512
LOG2E = 1.4426950408889634
MAX_HEADS_PER_PROGRAM = 64
LAUNCHED: dict = {}  # the last compiled partial kernel (benchmarks read its registers, spills and shared memory)
INT32_MAX = 2**31 - 1


@triton.jit
def _e4m3_times_scale(x, scale, FNUZ: tl.constexpr):
    """E4M3 bytes x [.., 64] times fp32 scales [.., 1], exactly. The byte's 7 magnitude bits shifted left by 7 are
    an FP16 pattern worth value * 2^-8 (OCP, bias 7 against FP16's 15) or value * 2^-7 (FNUZ, bias 8), subnormals
    included, and FP16 -> FP32 is exact, so two multiplies by powers of two give the reference's product bit for bit."""
    bits = x.to(tl.int32)
    half = (((bits & 0x80) << 8) | ((bits & 0x7F) << 7)).to(tl.uint16).to(tl.float16, bitcast=True)
    fix: tl.constexpr = 128.0 if FNUZ else 256.0
    value = half.to(tl.float32) * fix * scale
    if FNUZ:
        nan = bits == 0x80  # FNUZ's only NaN (it has no negative zero)
    else:
        nan = (bits & 0x7F) == 0x7F
    return tl.where(nan, float("nan"), value)


@triton.jit
def _dot(a, b, INTERPRET: tl.constexpr):
    """bf16 x bf16 -> fp32 on the tensor cores. Triton 3.9's CPU interpreter multiplies bf16 operands as their raw
    uint16 bit patterns, so there the same bf16 values go through an exact fp32 product instead."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _latents(cache_ptr, block_stride, num_rows, slot, in_row, BLOCK_SIZE: tl.constexpr, FNUZ: tl.constexpr,
             ROPE16: tl.constexpr, BLOCK_N: tl.constexpr):
    """BLOCK_N tokens' latents [BLOCK_N, 512] bf16 from the block-packed cache, zeros where the slot is invalid."""
    valid = in_row & (slot >= 0) & (slot < num_rows)
    slot = tl.where(valid, slot, 0).to(tl.int64)
    # Block-packed: a block is [BLOCK_SIZE x 576 data bytes][BLOCK_SIZE x 8 scale bytes], blocks block_stride apart.
    base = cache_ptr + (slot // BLOCK_SIZE) * block_stride
    pos = slot % BLOCK_SIZE
    data = base + pos * 576
    group = tl.arange(0, 8)
    col = tl.arange(0, 64)
    is_nope = (group < 7)[None, :, None]
    valid3 = valid[:, None, None]
    # NoPE value g*64 + c (g < 7): byte data[g*64 + c], scale byte data_scales[g]. Group 7 is the RoPE.
    x = tl.load(data[:, None, None] + (group * 64)[None, :, None] + col[None, None, :], mask=valid3 & is_nope,
                other=0)
    scale_byte = tl.load((base + BLOCK_SIZE * 576 + pos * 8)[:, None] + group[None, :], mask=valid[:, None],
                         other=127)
    scale = _pow2(scale_byte.to(tl.int32) - 127)
    nope = _e4m3_times_scale(x, scale[:, :, None], FNUZ)
    rope_at = (group * 0)[None, :, None] + col[None, None, :]
    if ROPE16:  # 2-byte aligned: one 16-bit load per RoPE value
        half = tl.load((data + 448).to(tl.pointer_type(tl.uint16))[:, None, None] + rope_at, mask=valid3 & ~is_nope,
                       other=0)
        rope = (half.to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        lo = tl.load(data[:, None, None] + 448 + 2 * rope_at, mask=valid3 & ~is_nope, other=0).to(tl.uint32)
        hi = tl.load(data[:, None, None] + 449 + 2 * rope_at, mask=valid3 & ~is_nope, other=0).to(tl.uint32)
        rope = ((hi << 24) | (lo << 16)).to(tl.float32, bitcast=True)
    latent = tl.where(is_nope, nope, rope).to(tl.bfloat16)
    return tl.reshape(latent, (BLOCK_N, 512)), valid


@triton.jit
def _attend(q, m_i, l_i, acc, cache_ptr, block_stride, num_rows, idx_ptr, row_start, row_end, tile_lo, tile_hi,
            qk_scale, BLOCK_SIZE: tl.constexpr, FNUZ: tl.constexpr, ROPE16: tl.constexpr, BLOCK_N: tl.constexpr,
            INTERPRET: tl.constexpr):
    """Online softmax over tiles [tile_lo, tile_hi) of one segment's row; scores in the log2 domain."""
    offs = tl.arange(0, BLOCK_N)
    for t in range(tile_lo, tile_hi):
        at = row_start + t * BLOCK_N + offs
        in_row = at < row_end
        slot = tl.load(idx_ptr + at, mask=in_row, other=-1)
        k, valid = _latents(cache_ptr, block_stride, num_rows, slot, in_row, BLOCK_SIZE, FNUZ, ROPE16, BLOCK_N)
        s = _dot(q, tl.trans(k), INTERPRET) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no valid score yet: keep exp2 away from -inf - -inf
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(tl.bfloat16), k, INTERPRET)
        m_i = m_new
    return m_i, l_i, acc


@triton.jit
def _row(b, row_stride, starts_ptr, starts_step, ends_ptr, ends_step, row_cap):
    """A query's [start, end) in its segment's flat index array: dense rows (b * K + [0, len)) and ragged rows
    (indptr[b], indptr[b + 1]) through one formula, so the kernel has no branch on the layout."""
    start = b * row_stride + tl.load(starts_ptr + b * starts_step)
    end = b * row_stride + tl.load(ends_ptr + b * ends_step)
    return start, tl.minimum(end, b * row_stride + row_cap)


@triton.jit
def _finish(acc, m_i, l_i, sink_ptr, heads, head_ok, out_ptr, lse_ptr, HAS_SINK: tl.constexpr):
    """Normalise and store: out = acc / l (times the sink factor), lse natural; l == 0 means no valid slot."""
    empty = l_i == 0.0  # a NaN l (a corrupt byte was attended) stays NaN, as in the reference
    lse = tl.where(empty, float("inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) / 1.4426950408889634)
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    if HAS_SINK:
        sink = tl.load(sink_ptr + heads, mask=head_ok, other=0.0).to(tl.float32)
        out = out / (1.0 + tl.exp(sink - lse))[:, None]
    out = tl.where(empty[:, None], 0.0, out)
    cols = tl.arange(0, 512)
    tl.store(out_ptr + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
    tl.store(lse_ptr, lse, mask=head_ok)


@triton.jit
def _partial_kernel(q_ptr, q_s0, q_s1,
                    main_ptr, main_stride, main_rows, main_idx, main_rs, main_st, main_st_s, main_en, main_en_s,
                    main_cap,
                    extra_ptr, extra_stride, extra_rows, extra_idx, extra_rs, extra_st, extra_st_s, extra_en,
                    extra_en_s, extra_cap,
                    part_ml_ptr, part_acc_ptr, sink_ptr, out_ptr, out_s0, out_s1, lse_ptr, lse_s0,
                    num_heads, num_splits, qk_scale,
                    MAIN_BLOCK: tl.constexpr, EXTRA_BLOCK: tl.constexpr, MAIN_FNUZ: tl.constexpr,
                    EXTRA_FNUZ: tl.constexpr, MAIN_ROPE16: tl.constexpr, EXTRA_ROPE16: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, HAS_SINK: tl.constexpr, DIRECT: tl.constexpr,
                    INTERPRET: tl.constexpr):
    b = tl.program_id(0)
    split = tl.program_id(1)
    heads = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < num_heads
    cols = tl.arange(0, 512)
    q = tl.load(q_ptr + b.to(tl.int64) * q_s0 + heads[:, None] * q_s1 + cols[None, :], mask=head_ok[:, None],
                other=0.0).to(tl.bfloat16)

    main_start, main_end = _row(b, main_rs, main_st, main_st_s, main_en, main_en_s, main_cap)
    extra_start, extra_end = _row(b, extra_rs, extra_st, extra_st_s, extra_en, extra_en_s, extra_cap)
    main_tiles = tl.cdiv(tl.maximum(main_end - main_start, 0), BLOCK_N)
    tiles = main_tiles + tl.cdiv(tl.maximum(extra_end - extra_start, 0), BLOCK_N)
    # Split `split` takes tiles [lo, hi) of the query's main-then-extra tile list; a tile never straddles segments.
    lo = split * tiles // num_splits
    hi = (split + 1) * tiles // num_splits

    m_i = tl.full((BLOCK_H,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_H,), tl.float32)
    acc = tl.zeros((BLOCK_H, 512), tl.float32)
    m_i, l_i, acc = _attend(q, m_i, l_i, acc, main_ptr, main_stride, main_rows, main_idx, main_start, main_end,
                            lo, tl.minimum(hi, main_tiles), qk_scale, MAIN_BLOCK, MAIN_FNUZ, MAIN_ROPE16, BLOCK_N,
                            INTERPRET)
    m_i, l_i, acc = _attend(q, m_i, l_i, acc, extra_ptr, extra_stride, extra_rows, extra_idx, extra_start,
                            extra_end, tl.maximum(lo, main_tiles) - main_tiles, hi - main_tiles, qk_scale,
                            EXTRA_BLOCK, EXTRA_FNUZ, EXTRA_ROPE16, BLOCK_N, INTERPRET)
    if DIRECT:  # one split: finish here, no partials, no second launch
        _finish(acc, m_i, l_i, sink_ptr, heads, head_ok,
                out_ptr + b.to(tl.int64) * out_s0 + heads[:, None] * out_s1, lse_ptr + b * lse_s0 + heads,
                HAS_SINK)
    else:
        row = (b * num_splits + split).to(tl.int64) * num_heads + heads  # partials [B, S, H]
        tl.store(part_ml_ptr + 2 * row, m_i, mask=head_ok)
        tl.store(part_ml_ptr + 2 * row + 1, l_i, mask=head_ok)
        tl.store(part_acc_ptr + row[:, None] * 512 + cols[None, :], acc, mask=head_ok[:, None])


@triton.jit
def _combine_kernel(part_ml_ptr, part_acc_ptr, sink_ptr, out_ptr, out_s0, out_s1, lse_ptr, lse_s0,
                    num_heads, num_splits, SPLITS: tl.constexpr, BLOCK_C: tl.constexpr, HAS_SINK: tl.constexpr):
    """Merge the splits of one query's head, BLOCK_C output columns a program: every split's (m, l) and partial
    accumulator are loaded at once (one round trip, not one per split) and weighted by exp2(m_s - max m)."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    cols = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    split = tl.arange(0, SPLITS)
    ok = split < num_splits
    row = (b * num_splits + split).to(tl.int64) * num_heads + head  # partials [B, S, H]
    m_s = tl.load(part_ml_ptr + 2 * row, mask=ok, other=float("-inf"))
    l_s = tl.load(part_ml_ptr + 2 * row + 1, mask=ok, other=0.0)
    acc_s = tl.load(part_acc_ptr + row[:, None] * 512 + cols[None, :], mask=ok[:, None], other=0.0)
    m_i = tl.max(m_s, 0)
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    weight = tl.where(ok, tl.exp2(m_s - m_safe), 0.0)
    l_i = tl.sum(l_s * weight, 0)
    acc = tl.sum(acc_s * weight[:, None], 0)
    empty = l_i == 0.0  # a NaN l (a corrupt byte was attended) stays NaN, as in the reference
    lse = tl.where(empty, float("inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) / 1.4426950408889634)
    out = acc / tl.where(empty, 1.0, l_i)
    if HAS_SINK:
        out = out / (1.0 + tl.exp(tl.load(sink_ptr + head).to(tl.float32) - lse))
    out = tl.where(empty, 0.0, out)
    tl.store(out_ptr + b.to(tl.int64) * out_s0 + head * out_s1 + cols, out.to(out_ptr.dtype.element_ty))
    first = cols == 0  # one lane of the query's first column block writes lse (a vector mask: the interpreter
    tl.store(lse_ptr + b * lse_s0 + head + cols * 0, lse + tl.zeros((BLOCK_C,), tl.float32), mask=first)  # wants one)


def combine_columns(splits: int) -> int:
    """Output columns per combine program: all splits' partial rows of them stay within ~8K floats."""
    return max(32, min(LATENT, 8192 // triton.next_power_of_2(splits)))


# ---- the wrapper ----------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _constant(device: torch.device, value: int) -> torch.Tensor:
    """A one-element int32 tensor read with step 0 by every query (kept: no allocation inside a captured graph)."""
    return torch.full((1,), value, dtype=torch.int32, device=device)


class _Segment:
    """One segment as the kernel takes it: `args` (cache, block stride, rows, flat int32 indices, row stride,
    starts, starts step, ends, ends step, row cap) and the constexprs (block size, FNUZ, 16-bit RoPE loads)."""

    def __init__(self, cache, indices, lengths, indptr, batch, fnuz, name):
        if cache.dtype != torch.uint8 or cache.dim() != 3 or cache.shape[2] != LOGICAL_TOKEN_BYTES:
            raise ValueError(f"{name}: expected a uint8 [num_blocks, block_size, {LOGICAL_TOKEN_BYTES}] fp8_ds_mla "
                             f"view, got {cache.dtype} {tuple(cache.shape)}")
        if cache.stride(1) != LOGICAL_TOKEN_BYTES or cache.stride(2) != 1:
            raise ValueError(f"{name}: a block must be contiguous inside (strides {cache.stride()})")
        device = cache.device
        flat = indices if indices.dtype == torch.int32 else indices.to(torch.int32)
        if indptr is not None:  # ragged: query b's slots are flat[indptr[b]:indptr[b + 1]]
            flat = flat.reshape(-1).contiguous()
            indptr = indptr.to(device=device, dtype=torch.int32).contiguous()
            if indptr.numel() != batch + 1:
                raise ValueError(f"{name}: indptr has {indptr.numel()} entries for {batch} queries")
            rows = (0, indptr[:-1], 1, indptr[1:], 1, INT32_MAX)
            self.width = flat.numel()  # at most all of it (vLLM's rows are at most topk wide)
        else:
            if flat.dim() != 2 or flat.shape[0] != batch:
                raise ValueError(f"{name}: indices must be [{batch}, K] (got {tuple(flat.shape)})")
            self.width = width = flat.shape[1]
            flat = flat.contiguous()
            if lengths is None:
                ends, step = _constant(device, width), 0
            else:
                ends, step = lengths.to(device=device, dtype=torch.int32).contiguous(), 1
            rows = (width, _constant(device, 0), 0, ends, step, width)
        self.args = (cache, cache.stride(0), cache.shape[0] * cache.shape[1], flat, *rows)
        self.block, self.fnuz = cache.shape[1], fnuz
        self.rope16 = cache.stride(0) % 2 == 0 and cache.data_ptr() % 2 == 0

    @classmethod
    def empty(cls, like: "_Segment") -> "_Segment":
        """No second segment: every query's row is [0, 0) of an empty index array."""
        seg = cls.__new__(cls)
        zero = _constant(like.args[0].device, 0)
        seg.args = (like.args[0], like.args[1], 0, zero, 0, zero, 0, zero, 0, 0)
        seg.block, seg.fnuz, seg.rope16, seg.width = like.block, False, like.rope16, 0
        return seg


def choose_splits(batch: int, head_blocks: int, tiles: int, programs: int | None = None) -> int:
    """Split-K: as many splits as keep the grid within `programs` (about two per multiprocessor), never more than
    the tiles, then trimmed so that every split gets the same number of tiles (the longest split sets the time):
    at 640 tokens in 16-token tiles, B = 1 gets 40 splits of one tile each (7.9 us on the H200 against 11.3 us for
    32 splits, where 8 splits take two tiles), docs/kernels.md."""
    if programs is None:
        programs = 2 * _multiprocessors()
    base = max(batch * head_blocks, 1)
    want = max(1, min(programs // base, tiles))
    per_split = -(-tiles // want)
    return max(1, -(-tiles // per_split))


def choose_block_n(batch: int, head_blocks: int, width: int, programs: int | None = None) -> int:
    """Tokens a tile: 16 while 32-token tiles, one a program, could not fill the device twice over (small B: more,
    shorter splits), else 32 (fewer, fuller tiles)."""
    if programs is None:
        programs = 2 * _multiprocessors()
    return 16 if batch * head_blocks * triton.cdiv(max(width, 1), 32) < programs else 32


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.lru_cache(maxsize=None)
def _multiprocessors() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).multi_processor_count
    return 4


def sparse_mla_decode(q: torch.Tensor, cache: torch.Tensor, indices: torch.Tensor, *,
                      extra_cache: torch.Tensor | None = None, extra_indices: torch.Tensor | None = None,
                      softmax_scale: float, attn_sink: torch.Tensor | None = None, block_size: int | None = None,
                      fnuz: bool = False, extra_fnuz: bool = False, lengths: torch.Tensor | None = None,
                      extra_lengths: torch.Tensor | None = None, indptr: torch.Tensor | None = None,
                      extra_indptr: torch.Tensor | None = None, out: torch.Tensor | None = None,
                      lse: torch.Tensor | None = None, num_splits: int | None = None, block_n: int | None = None,
                      num_warps: int | None = None, num_stages: int | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused decode (see the module docstring). q [B, H, 512] (448 NoPE + 64 RoPE); `indices` [B, K] int32
    global slots (-1 = none; with `lengths` [B], only the first lengths[b] count), or a flat array with `indptr`
    [B + 1] (vLLM's ragged form). Each cache's block size is its view's shape[1] (`block_size`, if given, must agree
    with the main cache). `fnuz`/`extra_fnuz`: AMD's FNUZ E4M3 per segment (vLLM reads the SWA cache with the
    platform's flavour and the compressed cache as OCP). out defaults to bf16 [B, H, 512]; lse is [B, H] fp32."""
    if q.dim() != 3 or q.shape[2] != LATENT or q.stride(2) != 1:
        raise ValueError(f"q must be [B, H, {LATENT}] with unit last stride, got {tuple(q.shape)}")
    if block_size is not None and block_size != cache.shape[1]:
        raise ValueError(f"block_size {block_size} disagrees with the cache view's {cache.shape[1]} tokens a block")
    if block_n not in (None, 16, 32):  # 16 is tl.dot's least; at 64 the tile needs more shared memory than an H200 has
        raise ValueError(f"block_n must be 16 or 32 (got {block_n})")
    batch, heads, _ = q.shape
    main = _Segment(cache, indices, lengths, indptr, batch, fnuz, "cache")
    if extra_cache is None:
        extra = _Segment.empty(main)
    else:
        if extra_indices is None:
            raise ValueError("extra_cache without extra_indices")
        extra = _Segment(extra_cache, extra_indices, extra_lengths, extra_indptr, batch, extra_fnuz, "extra_cache")
    if out is None:
        out = torch.empty((batch, heads, LATENT), dtype=torch.bfloat16, device=q.device)
    if lse is None:
        lse = torch.empty((batch, heads), dtype=torch.float32, device=q.device)
    if out.shape != q.shape or out.stride(2) != 1 or lse.shape != (batch, heads) or lse.stride(1) != 1:
        raise ValueError(f"out must be [B, H, {LATENT}] and lse [B, H], each with unit last stride")
    if batch == 0 or heads == 0:
        return out, lse
    block_h = max(16, min(triton.next_power_of_2(heads), MAX_HEADS_PER_PROGRAM))
    head_blocks = triton.cdiv(heads, block_h)
    # Tiles per query from the index widths alone (no device sync): an upper bound for ragged rows.
    width = main.width + extra.width
    if block_n is None:
        block_n = choose_block_n(batch, head_blocks, width)
    if num_splits is None:
        num_splits = choose_splits(batch, head_blocks, max(1, triton.cdiv(width, block_n)))
    if num_warps is None:
        num_warps = 4 if block_h <= 16 else 8
    if num_stages is None:  # no software pipelining: its buffers cost the shared memory a second program needs
        num_stages = 1
    sink = attn_sink if attn_sink is not None else lse  # any pointer: not read without HAS_SINK
    direct = num_splits == 1
    part_ml = part_acc = out  # unused when direct
    if not direct:
        part_ml = torch.empty((batch, num_splits, heads, 2), dtype=torch.float32, device=q.device)
        part_acc = torch.empty((batch, num_splits, heads, LATENT), dtype=torch.float32, device=q.device)
    grid = (batch, num_splits, head_blocks)
    LAUNCHED["partial"] = _partial_kernel[grid](
                          q, q.stride(0), q.stride(1), *main.args, *extra.args, part_ml, part_acc, sink, out,
                          out.stride(0), out.stride(1), lse, lse.stride(0), heads, num_splits,
                          softmax_scale * LOG2E, MAIN_BLOCK=main.block, EXTRA_BLOCK=extra.block,
                          MAIN_FNUZ=main.fnuz, EXTRA_FNUZ=extra.fnuz, MAIN_ROPE16=main.rope16,
                          EXTRA_ROPE16=extra.rope16, BLOCK_H=block_h,
                          BLOCK_N=block_n, HAS_SINK=attn_sink is not None, DIRECT=direct, INTERPRET=_interpreted(),
                          num_warps=num_warps, num_stages=num_stages)
    if not direct:
        columns = combine_columns(num_splits)
        _combine_kernel[(batch, heads, LATENT // columns)](part_ml, part_acc, sink, out, out.stride(0), out.stride(1),
                                                           lse, lse.stride(0), heads, num_splits,
                                                           SPLITS=triton.next_power_of_2(num_splits),
                                                           BLOCK_C=columns, HAS_SINK=attn_sink is not None,
                                                           num_warps=4)
    return out, lse

