"""Benchmark (GPU): gathering tokens from the block-packed fp8_ds_mla cache, reference reader vs Triton kernel.

Builds a cache of --blocks blocks (vLLM's padded block stride, filled by the reference writer), then for 1k to 1M
random slots times both readers with CUDA events (median of --iters after warm-up), checks they agree bit for bit,
and prints effective GB/s (584 bytes read + 2048 bytes written per token), the kernel/reference ratio, and the
fraction of the device's measured copy bandwidth (a device-to-device copy, bytes read + written).
Target (issue 7): >= 10x the reference and >= 50% of copy bandwidth on the large gathers.

    python3 benchmarks/kvcache_gather.py [--blocks 32768] [--iters 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
from dsv4rt import kvcache  # noqa: E402
from dsv4rt.kvcache_triton import read_fp8_ds_mla_triton  # noqa: E402

BYTES_PER_TOKEN = kvcache.LOGICAL_TOKEN_BYTES + 512 * 4


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbs(iters: int) -> float:
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), iters)
    return 2 * src.numel() / (ms / 1000) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=32768)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: this benchmark needs one")
        return 2
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    cache = kvcache.make_cache(args.blocks, 64, device="cuda")
    tokens = args.blocks * 64
    for start in range(0, tokens, 1 << 20):
        slots = torch.arange(start, min(start + (1 << 20), tokens), device="cuda")
        kvcache.write_fp8_ds_mla(torch.randn(slots.numel(), 512, device="cuda") * 4, cache, slots, 64)
    print(f"cache: {args.blocks} blocks x 64 tokens, block stride {cache.stride(0)} B, "
          f"{args.blocks * cache.stride(0) / 2**30:.2f} GiB")
    copy_gbs = copy_bandwidth_gbs(args.iters)
    print(f"device copy bandwidth (read + write): {copy_gbs:.0f} GB/s")
    print(f"{'slots':>9} {'ref GB/s':>9} {'kernel GB/s':>12} {'tok/prog/w':>11} {'ratio':>7} {'of copy bw':>10} "
          f"{'equal':>6}")
    for n in (1_000, 10_000, 100_000, 1_000_000):
        if n > tokens:
            break
        slots = torch.randperm(tokens, device="cuda")[:n]
        ref_ms = time_ms(lambda: kvcache.read_fp8_ds_mla(cache, slots, 64), args.iters)
        best = None
        for per_program in (1, 2, 4, 8):
            for warps in (2, 4, 8):
                ms = time_ms(lambda: read_fp8_ds_mla_triton(cache, slots, 64, tokens_per_program=per_program,
                                                            num_warps=warps), args.iters)
                if best is None or ms < best[0]:
                    best = (ms, per_program, warps)
        kernel_ms, per_program, warps = best
        default_ms = time_ms(lambda: read_fp8_ds_mla_triton(cache, slots, 64), args.iters)
        equal = torch.equal(read_fp8_ds_mla_triton(cache, slots, 64, tokens_per_program=per_program,
                                                   num_warps=warps), kvcache.read_fp8_ds_mla(cache, slots, 64))
        ref_gbs = n * BYTES_PER_TOKEN / (ref_ms / 1000) / 1e9
        kernel_gbs = n * BYTES_PER_TOKEN / (kernel_ms / 1000) / 1e9
        default_gbs = n * BYTES_PER_TOKEN / (default_ms / 1000) / 1e9
        print(f"{n:>9} {ref_gbs:>9.1f} {kernel_gbs:>12.1f} {f'{per_program}/{warps}w':>11} "
              f"{ref_ms / kernel_ms:>6.1f}x {kernel_gbs / copy_gbs:>9.0%} {str(equal):>6}   "
              f"(defaults: {default_gbs:.0f} GB/s, {default_gbs / copy_gbs:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
