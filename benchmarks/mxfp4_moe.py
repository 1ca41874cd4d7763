"""Benchmark (GPU): the W4A16 MXFP4 MoE kernel against the emulation path, at DeepSeek V4 Flash's expert shapes.

Shapes (hidden 4096, moe_intermediate 2048, top-6): EP8 = 32 local experts of the full intermediate; TP8 = all 256
experts with the intermediate split eight ways (256). Random packed weights (every E2M1 code) with scale bytes near
a real checkpoint's; every token's 6 picks are distinct local experts (the heaviest load a rank can get).

Per T: the kernel's GPU time per call (CUDA-graph replay of R calls over R different routings, so launch gaps and
one routing's L2 reuse stay out; and eager, CUDA events), expert bytes touched (packed weights + scales of the
distinct experts the routing hits) per second and as a share of the device's copy bandwidth (a device-to-device copy,
bytes read + written), the emulation path (dequantize all local experts with the reference dequantizer, then bf16
matmuls) and dequantize-only-the-routed-experts + bf16, and the kernel's error against the emulation path with the
tests' tolerance. Targets (issue 28), EP8 in GPU time: >= 50% of copy bandwidth for T >= 8, >= 25% at T = 1,
>= 8x the emulation path at every T.

    python3 benchmarks/mxfp4_moe.py [--shapes ep8,tp8] [--tokens 1,8,32,64,256] [--sweep ep8] [--base JSON]
                                    [--tries JSON] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
from dsv4rt.moe_reference import moe_reference  # noqa: E402
from dsv4rt.moe_w4a16 import default_config, mxfp4_moe  # noqa: E402

SHAPES = {"ep8": (32, 4096, 2048), "tp8": (256, 4096, 256)}  # (local experts, hidden, intermediate)
TOPK = 6
ROUTINGS = 8


def events_ms(fn, iters: int, warmup: int = 2) -> float:
    for _ in range(warmup):
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


def copy_bandwidth_gbs() -> float:
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = events_ms(lambda: dst.copy_(src), 20)
    del src, dst
    return 2 * (2 << 30) / (ms / 1000) / 1e9


def make_weights(experts: int, hidden: int, inter: int, gen: torch.Generator) -> dict:
    def packed(*shape):
        return torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=gen)

    def scales(*shape):
        return torch.randint(117, 122, shape, dtype=torch.uint8, device="cuda", generator=gen)

    return {"w13": packed(experts, 2 * inter, hidden // 2), "s13": scales(experts, 2 * inter, hidden // 32),
            "w2": packed(experts, hidden, inter // 2), "s2": scales(experts, hidden, inter // 32)}


def make_routings(tokens: int, experts: int, gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for _ in range(ROUTINGS):
        ids = torch.rand(tokens, experts, device="cuda", generator=gen).topk(TOPK, dim=1).indices.int()
        weights = torch.rand(tokens, TOPK, device="cuda", generator=gen) + 0.05
        out.append((ids, weights / weights.sum(1, keepdim=True)))
    return out


def expert_bytes(w: dict) -> int:
    return sum(w[k][0].numel() for k in ("w13", "s13", "w2", "s2"))


def graph_us(w: dict, xs: list, routings: list, config: dict | None, iters: int) -> float:
    """GPU time per call: one CUDA graph of ROUTINGS calls (each its own x and routing), replayed."""
    def calls():
        for x, (ids, wts) in zip(xs, routings):
            mxfp4_moe(x, w["w13"], w["s13"], w["w2"], w["s2"], ids, wts, config=config)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        calls()  # compile and warm up outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls()
    return events_ms(graph.replay, iters) * 1000 / len(routings)


def variant_configs(base: dict) -> list[dict]:
    """Stage 1 (EP8, T = 8): decode arithmetic x operand order x K layout x prefetch; DECODE 2 is the no-decode
    timing probe."""
    return [{**base, "DECODE": d, "SWAP": swap, "JOIN": join, "PREFETCH": pre}
            for d, swap, join, pre in itertools.product((0, 1, 2), (False, True), (True, False), (False, True))]


def tile_configs(base: dict) -> list[dict]:
    """Stage 2: tile width, K step and warps around the best stage-1 variant."""
    return [{**base, "BN1": bn, "BN2": bn, "BK": bk, "warps": warps}
            for bn, bk, warps in itertools.product((32, 64, 128), (128, 256), (4, 8))]


def fastest(w, xs, routings, configs, iters, budget_s, log) -> tuple[float, dict, list]:
    """The fastest real (non-probe) config of `configs` by graph time, and every timing (probes included)."""
    started, timed = time.time(), []
    for cfg in configs:
        if time.time() - started > budget_s:
            break
        try:
            timed.append((graph_us(w, xs, routings, cfg, iters), cfg))
        except Exception as exc:  # a config the compiler refuses: recorded, skipped
            log(f"  compile/launch failed for {cfg}: {type(exc).__name__}: {str(exc).splitlines()[-1][:160]}")
    real = [t for t in timed if t[1]["DECODE"] != 2]
    if not real:
        raise RuntimeError("no config ran")
    us, cfg = min(real, key=lambda t: t[0])
    return us, cfg, timed


def check(w: dict, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor, config: dict | None) -> dict:
    y = mxfp4_moe(x, w["w13"], w["s13"], w["w2"], w["s2"], ids, wts, config=config).float()
    ref, bound = moe_reference(x, w["w13"], w["s13"], w["w2"], w["s2"], ids, wts, dequantize="routed",
                               with_bound=True)
    ref = ref.float()
    return {"excess": ((y - ref).abs() / (bound + 1e-30)).max().item(),
            "rel_l2": ((y - ref).norm() / ref.norm()).item(), "finite": bool(torch.isfinite(y).all())}


def run_shape(name: str, tokens_list: list[int], copy_gbs: float, base: dict | None, sweep: bool, iters: int,
              budget_s: float, tries: list[dict]) -> tuple[list, dict]:
    experts, hidden, inter = SHAPES[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = make_weights(experts, hidden, inter, gen)
    per_expert = expert_bytes(w)
    rows, probes = [], {}
    if sweep and base is None:  # stages 1 and 2 once, at T = 8; every T then starts from the winner
        routings = make_routings(8, experts, gen)
        xs = [torch.randn(8, hidden, device="cuda", generator=gen).bfloat16() for _ in routings]
        start = default_config(8, TOPK, experts)
        _, best, timed = fastest(w, xs, routings, variant_configs(start), iters, 4 * budget_s, print)
        for us, cfg in timed:
            key = f"DECODE{cfg['DECODE']} SWAP{int(cfg['SWAP'])} JOIN{int(cfg['JOIN'])} PREFETCH{int(cfg['PREFETCH'])}"
            probes[key] = us
            print(f"  variant {key}: {us:.1f} us", flush=True)
        us, base, timed = fastest(w, xs, routings, tile_configs(best), iters, 4 * budget_s, print)
        for t_us, cfg in timed:
            print(f"  tile BN={cfg['BN1']} BK={cfg['BK']} warps={cfg['warps']}: {t_us:.1f} us", flush=True)
    for tokens in tokens_list:
        routings = make_routings(tokens, experts, gen)
        xs = [torch.randn(tokens, hidden, device="cuda", generator=gen).bfloat16() for _ in routings]
        touched = statistics.mean(torch.unique(ids).numel() for ids, _ in routings)
        moved = touched * per_expert
        start = {**default_config(tokens, TOPK, experts), **{k: v for k, v in (base or {}).items() if k != "BM"}}
        candidates = [start]
        if sweep:
            candidates += [{**start, "BN1": bn, "BN2": bn} for bn in (32, 64, 128) if bn != start["BN1"]]
            candidates += [{**start, "BM": bm} for bm in (16, 32, 64) if bm != start["BM"]]
            candidates += [{**start, **extra} for extra in tries]
        best_us, best_cfg, _ = fastest(w, xs, routings, candidates, iters, budget_s, print)
        x0, (ids0, wts0) = xs[0], routings[0]
        eager_us = events_ms(lambda: mxfp4_moe(x0, w["w13"], w["s13"], w["w2"], w["s2"], ids0, wts0,
                                               config=best_cfg), iters) * 1000
        emul_us = events_ms(lambda: moe_reference(x0, w["w13"], w["s13"], w["w2"], w["s2"], ids0, wts0),
                            3, warmup=1) * 1000
        routed_us = events_ms(lambda: moe_reference(x0, w["w13"], w["s13"], w["w2"], w["s2"], ids0, wts0,
                                                    dequantize="routed"), 5, warmup=1) * 1000
        good = check(w, x0, ids0, wts0, best_cfg)
        gbs = moved / (best_us / 1e6) / 1e9
        row = {"shape": name, "T": tokens, "experts_touched": touched, "bytes_touched": moved,
               "kernel_graph_us": best_us, "kernel_eager_us": eager_us, "config": best_cfg, "GBps": gbs,
               "of_copy_bw": gbs / copy_gbs, "emulation_us": emul_us, "routed_dequant_us": routed_us,
               "x_emulation": emul_us / best_us, "x_routed": routed_us / best_us,
               "floor_us": moved / (copy_gbs * 1e9) * 1e6, **good}
        rows.append(row)
        print(json.dumps(row), flush=True)
    del w
    torch.cuda.empty_cache()
    return rows, {"base": base, "probes_T8_us": probes}


def table(rows: list, copy_gbs: float) -> str:
    lines = [f"copy bandwidth (read + write): {copy_gbs:.0f} GB/s",
             f"{'shape':>5} {'T':>4} {'exp':>5} {'MB':>6} {'kernel us':>9} {'(eager)':>8} {'GB/s':>6} {'of copy':>7} "
             f"{'emul us':>8} {'x emul':>7} {'routed us':>9} {'x routed':>8} {'excess':>6} {'rel_l2':>7} config"]
    for r in rows:
        c = r["config"]
        lines.append(
            f"{r['shape']:>5} {r['T']:>4} {r['experts_touched']:>5.1f} {r['bytes_touched'] / 1e6:>6.0f} "
            f"{r['kernel_graph_us']:>9.1f} {r['kernel_eager_us']:>8.1f} {r['GBps']:>6.0f} {r['of_copy_bw']:>7.0%} "
            f"{r['emulation_us']:>8.0f} {r['x_emulation']:>6.0f}x {r['routed_dequant_us']:>9.0f} "
            f"{r['x_routed']:>7.0f}x {r['excess']:>6.2f} {r['rel_l2']:>7.4f} "
            f"BM{c['BM']} BN{c['BN1']}/{c['BN2']} BK{c['BK']} {'join' if c['JOIN'] else 'split'}"
            f"{' swap' if c['SWAP'] else ''}{' pre' if c['PREFETCH'] else ''} dec{c['DECODE']} w{c['warps']} "
            f"s{c['stages']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="ep8,tp8")
    parser.add_argument("--tokens", default="1,8,32,64,256")
    parser.add_argument("--sweep", default="", help="shapes (e.g. ep8) where a grid of tile configs is tried per T")
    parser.add_argument("--sweep-budget-s", type=float, default=60.0, help="seconds of sweeping per T at most")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--base", help="a JSON config to start from (skips the T = 8 variant search)")
    parser.add_argument("--tries", default="[]", help="JSON list of config overrides also swept at every T")
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: this benchmark needs one")
        return 2
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # the reference: fp32 accumulation
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    copy_gbs = copy_bandwidth_gbs()
    tokens = [int(t) for t in args.tokens.split(",")]
    rows, notes, base = [], {}, json.loads(args.base) if args.base else None
    for shape in args.shapes.split(","):
        more, notes[shape] = run_shape(shape, tokens, copy_gbs, base, shape in args.sweep.split(","), args.iters,
                                       args.sweep_budget_s, json.loads(args.tries))
        rows += more
        base = base or notes[shape]["base"]  # the next shape starts from the first one's winner
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_GBps": copy_gbs, "rows": rows, "notes": notes}, indent=1))
    print(table(rows, copy_gbs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
