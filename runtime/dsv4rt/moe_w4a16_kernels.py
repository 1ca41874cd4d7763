"""Triton kernels of the W4A16 MXFP4 MoE (`moe_w4a16.mxfp4_moe` launches them; that module says what they compute).

Everything is integer arithmetic plus float32/bf16 (DECODE 3: float16) multiplies: no FP4 or FP8 dtype, no
`tl.dot_scaled` (which a gfx936 Triton cannot lower), so the kernels also run in Triton's CPU interpreter. In the
interpreter bf16 arithmetic and bf16 dots are not trustworthy (Triton 3.9 gives wrong dots and truncating casts), so
`DOT_F32` keeps the operands in float32 there, and every bf16 output is rounded to nearest-even by hand
(`_bf16_bits`) on both paths.
"""

from __future__ import annotations

import triton
import triton.language as tl

MX_GROUP = 32  # values per UE8M0 scale byte; 16 packed bytes


@triton.jit
def _scale_f32(s):
    """UE8M0 byte -> 2**(s - 127) as float32, exactly: the byte is the biased exponent (0 is the subnormal 2**-127,
    255 gives inf, as torch.exp2(128) does in the reference)."""
    s = s.to(tl.int32)
    return tl.where(s == 0, 0x00400000, s << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_f32(code):
    """E2M1 code (int32 0..15) -> its value as float32. The three magnitude bits go to float32 bits 22-24 (exponent's
    two low bits, mantissa's top bit): that is the value times 2**-126, the 0.5 code landing on the subnormal 2**-127;
    one exact multiply by 2**126 restores it."""
    bits = ((code & 7) << 22) | ((code & 8) << 28)
    return bits.to(tl.float32, bitcast=True) * 8.507059173023462e37  # 2**126


@triton.jit
def _bf16_bits(x):
    """float32 -> bf16 bit pattern (int16), round to nearest even; NaN stays a quiet NaN."""
    bits = x.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return tl.where(x != x, 0x7FC0, rounded).to(tl.int16)


@triton.jit
def _decode_kernel(packed_ptr, scale_ptr, out_ptr, R, G, RB: tl.constexpr, GB: tl.constexpr, BF16: tl.constexpr):
    """Test entry for the decode helpers: packed [R, G*16] and scales [R, G] -> float32 [R, G*32] (BF16: through
    the GEMM's bf16 decode, DECODE=1)."""
    r = tl.program_id(0) * RB + tl.arange(0, RB)
    g = tl.program_id(1) * GB + tl.arange(0, GB)
    j = tl.arange(0, 16)
    mask = (r[:, None] < R) & (g[None, :] < G)
    b = tl.load(packed_ptr + r[:, None, None] * (G * 16) + g[None, :, None] * 16 + j[None, None, :],
                mask=mask[:, :, None], other=0).to(tl.int32)
    f = _scale_f32(tl.load(scale_ptr + r[:, None] * G + g[None, :], mask=mask, other=127))[:, :, None]
    if BF16:
        fb = f.to(tl.bfloat16)
        lo = _e2m1_bf16(((b & 7) << 6) | ((b & 8) << 12), fb).to(tl.float32)
        hi = _e2m1_bf16(((b & 0x70) << 2) | ((b & 0x80) << 8), fb).to(tl.float32)
    else:
        lo = _e2m1_f32(b & 15) * f
        hi = _e2m1_f32(b >> 4) * f
    values = tl.join(lo, hi)  # [RB, GB, 16, 2]: low nibble first
    k = g[None, :, None, None] * 32 + j[None, None, :, None] * 2 + tl.arange(0, 2)[None, None, None, :]
    tl.store(out_ptr + r[:, None, None, None] * (G * 32) + k, values, mask=mask[:, :, None, None])


@triton.jit
def _route_kernel(ids_ptr, P, E, scratch_ptr, rows_ptr, block_expert_ptr, block_rows_ptr, n_blocks,
                  BM: tl.constexpr, E_PAD: tl.constexpr, CHUNK: tl.constexpr, BCHUNK: tl.constexpr):
    """One program groups the T*k picks by expert, with no host sync: block b of BM rows belongs to expert
    block_expert[b] (-1: unused), holds block_rows[b] picks, listed at rows[b*BM : b*BM + block_rows[b]].
    Picks whose id is not in [0, E) (vLLM's -1 for a remote expert) are skipped. Within an expert the row order is
    the atomics' order; each row's result does not depend on its place in a tile."""
    experts = tl.arange(0, E_PAD)
    counts_ptr = scratch_ptr
    start_ptr = scratch_ptr + E_PAD
    rank_ptr = scratch_ptr + 2 * E_PAD
    tl.store(counts_ptr + experts, tl.zeros([E_PAD], dtype=tl.int32))
    tl.debug_barrier()
    for s in range(0, P, CHUNK):
        p = s + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + p, mask=p < P, other=-1)
        ok = (p < P) & (e >= 0) & (e < E)
        rank = tl.atomic_add(counts_ptr + tl.where(ok, e, 0), 1, mask=ok)
        tl.store(rank_ptr + p, rank, mask=ok)
    tl.debug_barrier()
    counts = tl.atomic_add(counts_ptr + experts, 0)  # an atomic read: sees every add above
    blocks = (counts + BM - 1) // BM
    block_end = tl.cumsum(blocks, 0)
    block_start = block_end - blocks
    total = tl.sum(blocks, 0)
    tl.store(start_ptr + experts, block_start)
    for s in range(0, n_blocks, BCHUNK):
        b = s + tl.arange(0, BCHUNK)
        owner = tl.sum((block_end[None, :] <= b[:, None]).to(tl.int32), 1)  # the first expert ending after b
        mine = owner[:, None] == experts[None, :]
        first = tl.sum(tl.where(mine, block_start[None, :], 0), 1)
        count = tl.sum(tl.where(mine, counts[None, :], 0), 1)
        used = b < total
        tl.store(block_expert_ptr + b, tl.where(used, owner, -1), mask=b < n_blocks)
        tl.store(block_rows_ptr + b, tl.where(used, tl.minimum(count - (b - first) * BM, BM), 0), mask=b < n_blocks)
    tl.debug_barrier()
    for s in range(0, P, CHUNK):
        p = s + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + p, mask=p < P, other=-1)
        ok = (p < P) & (e >= 0) & (e < E)
        rank = tl.load(rank_ptr + p, mask=ok, other=0)
        first = tl.load(start_ptr + tl.where(ok, e, 0), mask=ok, other=0)
        tl.store(rows_ptr + first * BM + rank, p, mask=ok)


@triton.jit
def _e2m1_bf16(bits16, f):
    """E2M1 magnitude bits at bf16 bits 6-8 and the sign at bit 15 (int32) -> the value times f, in bf16: the same
    2**-126 trick as _e2m1_f32 in bf16's identical exponent range (exact wherever bf16 keeps subnormals)."""
    v = bits16.to(tl.int16).to(tl.bfloat16, bitcast=True)
    return (v * 8.507059173023462e37) * f


@triton.jit
def _load_tile(w_ptrs, s_ptrs, mask):
    """The packed bytes [BN, BK/32, 16] and scale bytes [BN, BK/32] of one weight tile (rows outside `mask`: 0)."""
    return tl.load(w_ptrs, mask=mask[:, None, None], other=0), tl.load(s_ptrs, mask=mask[:, None], other=127)


@triton.jit
def _weight_tile(packed, scale_bytes, BN: tl.constexpr, BK: tl.constexpr, DECODE: tl.constexpr,
                 DOT_F32: tl.constexpr):
    """Packed [BN, BK/32, 16] bytes and [BN, BK/32] scales -> the decoded low- and high-nibble halves, each
    [BN, BK/2] (even and odd K). DECODE 0: in float32 (the interpreter's path); 1: in bf16; 2: a timing probe that
    skips the decode (wrong values: benchmarks only)."""
    b = packed.to(tl.int32)
    f = _scale_f32(scale_bytes)[:, :, None]
    if DECODE == 1 and not DOT_F32:
        fb = f.to(tl.bfloat16)
        lo = _e2m1_bf16(((b & 7) << 6) | ((b & 8) << 12), fb)
        hi = _e2m1_bf16(((b & 0x70) << 2) | ((b & 0x80) << 8), fb)
    elif DECODE == 2 and not DOT_F32:
        lo = (b & 15).to(tl.bfloat16)
        hi = (b >> 4).to(tl.bfloat16)
    else:
        lo = _e2m1_f32(b & 15) * f
        hi = _e2m1_f32(b >> 4) * f
        if not DOT_F32:  # exact: an E2M1 value times a power of two has two significant bits
            lo = lo.to(tl.bfloat16)
            hi = hi.to(tl.bfloat16)
    return tl.reshape(lo, (BN, BK // 2)), tl.reshape(hi, (BN, BK // 2))


@triton.jit
def _a_tile(a_ptrs, rmask, JOIN: tl.constexpr, DOT_F32: tl.constexpr):
    """The A rows of one K step: the whole [BM, BK] tile (JOIN), or its even and odd columns."""
    a_even = tl.load(a_ptrs, mask=rmask[:, None], other=0.0)
    if JOIN:
        a_odd = a_even
    else:
        a_odd = tl.load(a_ptrs + 1, mask=rmask[:, None], other=0.0)
    if DOT_F32:
        a_even = a_even.to(tl.float32)
        a_odd = a_odd.to(tl.float32)
    return a_even, a_odd


@triton.jit
def _dot_tile(a_even, a_odd, packed, scale_bytes, acc, BN: tl.constexpr, BK: tl.constexpr, JOIN: tl.constexpr,
              SWAP: tl.constexpr, DECODE: tl.constexpr, DOT_F32: tl.constexpr):
    """acc + A tile x decoded weight tile^T ([BM, BN]; SWAP: its transpose, [BN, BM], the weights as the MMA's
    tall operand). JOIN: one dot over K in order (a_even holds the whole A tile); otherwise two dots, even K against
    the low nibbles and odd K against the high ones."""
    lo, hi = _weight_tile(packed, scale_bytes, BN, BK, DECODE, DOT_F32)
    if JOIN:
        w = tl.reshape(tl.join(lo, hi), (BN, BK))
        if SWAP:
            acc = tl.dot(w, tl.trans(a_even), acc)
        else:
            acc = tl.dot(a_even, tl.trans(w), acc)
    else:
        if SWAP:
            acc = tl.dot(lo, tl.trans(a_even), acc)
            acc = tl.dot(hi, tl.trans(a_odd), acc)
        else:
            acc = tl.dot(a_even, tl.trans(lo), acc)
            acc = tl.dot(a_odd, tl.trans(hi), acc)
    return acc


@triton.jit
def _fp16_pairs(w):
    """uint32 words of 8 E2M1 codes -> 8 float16 tensors, nibble i of each word: the value times 2**-14. One shift
    and mask pass puts two codes (nibbles i and i + 4, 16 bits apart) at once into the magnitude bits 9-11 and the
    sign bit 15 of the two halves (E2M1's bias 1 against FP16's 15; the 0.5 code lands on the subnormal 2**-15)."""
    p0 = ((w << 9) & 0x0E000E00) | ((w << 12) & 0x80008000)
    p1 = ((w << 5) & 0x0E000E00) | ((w << 8) & 0x80008000)
    p2 = ((w << 1) & 0x0E000E00) | ((w << 4) & 0x80008000)
    p3 = ((w >> 3) & 0x0E000E00) | (w & 0x80008000)
    lo0 = (p0 & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    hi0 = (p0 >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    lo1 = (p1 & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    hi1 = (p1 >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    lo2 = (p2 & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    hi2 = (p2 >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    lo3 = (p3 & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True)
    hi3 = (p3 >> 16).to(tl.uint16).to(tl.float16, bitcast=True)
    return lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3


@triton.jit
def _a_group(a_ptrs, rmask, NORM_A: tl.constexpr):
    """DECODE 3's A operand for one group of 32 K values: [BM, 32] float16 and (NORM_A) each row's power of two
    [BM] that the float16 values are to be multiplied by. NORM_A brings the row's 32 values to a largest magnitude
    in [1, 2) first (exact for bf16 values down to 2**-14 of the largest), so activations far outside float16's
    range (tiny or huge bf16 values) keep their precision; without it A is converted as is."""
    a = tl.load(a_ptrs, mask=rmask[:, None], other=0.0).to(tl.float32)
    if NORM_A:
        biased = (tl.max(tl.abs(a), axis=1).to(tl.int32, bitcast=True) >> 23) & 0xFF
        e = tl.minimum(tl.maximum(biased, 1), 253)
        down = ((254 - e) << 23).to(tl.float32, bitcast=True)  # 2**(127 - e)
        return (a * down[:, None]).to(tl.float16), (e << 23).to(tl.float32, bitcast=True)  # and 2**(e - 127)
    return a.to(tl.float16), tl.zeros((a.shape[0],), dtype=tl.float32)


@triton.jit
def _group_dot(a, a_pow, words, scale_byte, acc, BN: tl.constexpr, NORM_A: tl.constexpr, DOT_F32: tl.constexpr):
    """DECODE 3, one group of 32 K values: acc [BM, BN] + scale[n] * (A x codes^T), the codes as float16 (value *
    2**-14, _fp16_pairs) and the UE8M0 scale (and A's power of two) applied to the group's float32 product, not to
    each weight; the 2**14 is restored once, in the epilogue. words [BN, 4] uint32, scale_byte [BN]."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _fp16_pairs(words)
    # [n, word, k, j, i] = nibble i + 2j + 4k of the word: the group's K order
    w = tl.join(tl.join(tl.join(t0, t4), tl.join(t2, t6)), tl.join(tl.join(t1, t5), tl.join(t3, t7)))
    w = tl.reshape(w, (BN, 32))
    if DOT_F32:
        d = tl.dot(a.to(tl.float32), tl.trans(w.to(tl.float32)))
    else:
        d = tl.dot(a, tl.trans(w))
    if NORM_A:
        d = d * a_pow[:, None]
    return acc + d * _scale_f32(scale_byte)[None, :]


@triton.jit
def _expert_gemm_kernel(a_ptr, w_ptr, s_ptr, out_ptr, rows_ptr, block_expert_ptr, block_rows_ptr, topw_ptr,
                        N, K, stride_a, stride_we, stride_wn, stride_se, stride_sn, stride_out, up_rows,
                        alpha, limit,
                        TOPK: tl.constexpr, SWIGLU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr, JOIN: tl.constexpr, SWAP: tl.constexpr, DECODE: tl.constexpr,
                        PREFETCH: tl.constexpr, NORM_A: tl.constexpr, DOT_F32: tl.constexpr):
    """One program: BM picks of one expert x BN output columns, over all of K. SWIGLU (the first GEMM): A = x rows
    of the picks' tokens, weight rows n (gate) and up_rows + n (up), out = bf16 SwiGLU [P, N]. Otherwise (the
    second GEMM): A = the picks' rows of h, out = float32 routing weight x product, [P, N]."""
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block)
    if expert < 0:
        return
    n_rows = tl.load(block_rows_ptr + block)
    r = tl.arange(0, BM)
    rmask = r < n_rows
    pick = tl.load(rows_ptr + block * BM + r, mask=rmask, other=0)
    if SWIGLU:
        arow = (pick // TOPK).to(tl.int64)
    else:
        arow = pick.to(tl.int64)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = n < N
    G: tl.constexpr = BK // 32
    w_ptrs = (w_ptr + expert.to(tl.int64) * stride_we + n[:, None, None].to(tl.int64) * stride_wn
              + tl.arange(0, G)[None, :, None] * 16 + tl.arange(0, 16)[None, None, :])
    s_ptrs = s_ptr + expert.to(tl.int64) * stride_se + n[:, None].to(tl.int64) * stride_sn + tl.arange(0, G)[None, :]
    up_w = up_rows * stride_wn
    up_s = up_rows * stride_sn
    if JOIN:
        a_ptrs = a_ptr + arow[:, None] * stride_a + tl.arange(0, BK)[None, :]
    else:
        a_ptrs = a_ptr + arow[:, None] * stride_a + 2 * tl.arange(0, BK // 2)[None, :]
    if SWAP:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
        acc_up = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc_up = tl.zeros((BM, BN), dtype=tl.float32)
    if PREFETCH:  # the next K step's weight bytes are loaded before this step's decode (by hand: two buffers)
        w_next, s_next = _load_tile(w_ptrs, s_ptrs, nmask)
        if SWIGLU:
            u_next, t_next = _load_tile(w_ptrs + up_w, s_ptrs + up_s, nmask)
        for k0 in range(0, K, BK):
            a_even, a_odd = _a_tile(a_ptrs + k0, rmask, JOIN, DOT_F32)
            more = nmask & (n * 0 + (k0 + BK) < K)  # a vector: the interpreter refuses a scalar in a mask
            w_cur, s_cur = w_next, s_next
            w_next, s_next = _load_tile(w_ptrs + (k0 + BK) // 2, s_ptrs + (k0 + BK) // 32, more)
            if SWIGLU:
                u_cur, t_cur = u_next, t_next
                u_next, t_next = _load_tile(w_ptrs + ((k0 + BK) // 2 + up_w), s_ptrs + ((k0 + BK) // 32 + up_s),
                                            more)
            acc = _dot_tile(a_even, a_odd, w_cur, s_cur, acc, BN, BK, JOIN, SWAP, DECODE, DOT_F32)
            if SWIGLU:
                acc_up = _dot_tile(a_even, a_odd, u_cur, t_cur, acc_up, BN, BK, JOIN, SWAP, DECODE, DOT_F32)
    elif DECODE == 3:  # per 32-value group: the packed rows as uint32 words [BN, 4], A as [BM, 32] float16
        wrow = (w_ptr + expert.to(tl.int64) * stride_we + n.to(tl.int64) * stride_wn).to(tl.pointer_type(tl.uint32))
        word_ptrs = wrow[:, None] + tl.arange(0, 4)[None, :]
        srow = s_ptr + expert.to(tl.int64) * stride_se + n.to(tl.int64) * stride_sn
        up_words = up_w // 4
        a_ptrs3 = a_ptr + arow[:, None] * stride_a + tl.arange(0, 32)[None, :]
        for k0 in range(0, K, BK):
            for g in tl.static_range(G):
                kg = k0 + 32 * g
                a, a_pow = _a_group(a_ptrs3 + kg, rmask, NORM_A)
                words = tl.load(word_ptrs + kg // 8, mask=nmask[:, None], other=0)
                scale = tl.load(srow + kg // 32, mask=nmask, other=127)
                acc = _group_dot(a, a_pow, words, scale, acc, BN, NORM_A, DOT_F32)
                if SWIGLU:
                    words = tl.load(word_ptrs + (kg // 8 + up_words), mask=nmask[:, None], other=0)
                    scale = tl.load(srow + (kg // 32 + up_s), mask=nmask, other=127)
                    acc_up = _group_dot(a, a_pow, words, scale, acc_up, BN, NORM_A, DOT_F32)
        acc = acc * 16384.0  # the 2**14 the float16 codes left out
        acc_up = acc_up * 16384.0
    else:
        for k0 in range(0, K, BK):
            a_even, a_odd = _a_tile(a_ptrs + k0, rmask, JOIN, DOT_F32)
            w_cur, s_cur = _load_tile(w_ptrs + k0 // 2, s_ptrs + k0 // 32, nmask)
            acc = _dot_tile(a_even, a_odd, w_cur, s_cur, acc, BN, BK, JOIN, SWAP, DECODE, DOT_F32)
            if SWIGLU:
                u_cur, t_cur = _load_tile(w_ptrs + (k0 // 2 + up_w), s_ptrs + (k0 // 32 + up_s), nmask)
                acc_up = _dot_tile(a_even, a_odd, u_cur, t_cur, acc_up, BN, BK, JOIN, SWAP, DECODE, DOT_F32)
    if SWAP:  # back to [BM, BN] for the epilogue
        acc = tl.trans(acc)
        acc_up = tl.trans(acc_up)
    omask = rmask[:, None] & nmask[None, :]
    o_ptrs = out_ptr + pick[:, None].to(tl.int64) * stride_out + n[None, :]
    if SWIGLU:  # DeepSeek V4's clamped SwiGLU, as mxfp4.swiglu_clamp
        gate = tl.minimum(acc, limit)
        up = tl.minimum(tl.maximum(acc_up, -limit), limit)
        tl.store(o_ptrs, _bf16_bits(gate * tl.sigmoid(alpha * gate) * up), mask=omask)
    else:
        weight = tl.load(topw_ptr + pick, mask=rmask, other=0.0)
        tl.store(o_ptrs, acc * weight[:, None], mask=omask)


@triton.jit
def _combine_kernel(part_ptr, ids_ptr, y_ptr, H, E, TOPK: tl.constexpr, RB: tl.constexpr):
    """y[t] = sum over the token's kept picks of part[t*k + j], in pick order, float32, then bf16."""
    t = tl.program_id(0)
    n = tl.program_id(1) * RB + tl.arange(0, RB)
    nmask = n < H
    acc = tl.zeros((RB,), dtype=tl.float32)
    for j in tl.static_range(TOPK):
        e = tl.load(ids_ptr + t * TOPK + j + tl.zeros((RB,), dtype=tl.int32))  # one id, as a vector for the mask
        kept = (e >= 0) & (e < E)
        acc += tl.load(part_ptr + (t * TOPK + j).to(tl.int64) * H + n, mask=nmask & kept, other=0.0)
    tl.store(y_ptr + t.to(tl.int64) * H + n, _bf16_bits(acc), mask=nmask)
