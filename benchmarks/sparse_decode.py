"""Benchmark (GPU): DeepSeek V4's sparse-MLA decode over the block-packed fp8_ds_mla cache (issue 27).

For H heads, T selected tokens per query (a window of min(T, 128) in the SWA cache, the rest in the compressed
cache) and B queries, side by side in one run:
  reference  kvcache.read_fp8_ds_mla + fp32 attention (the oracle)
  gather     the Triton gather kernel + torch bf16 attention (the two-step path)
  fused      sparse_decode.sparse_mla_decode with its default split/tile choice, and (--tune) the best of
             block_n x warps x splits
  peers      each --peer: `vllm-rocm:PATH` loads vLLM's ROCm split-K kernels (_sparse_attn_decode_partial_kernel +
             _sparse_attn_decode_reduce_kernel) from that rocm_aiter_mla_sparse.py and takes the best of 1, 2, 4, 8, 16
             splits;
             `FILE.py:FUNCTION` calls FUNCTION(q, cache, indices, extra_cache, extra_indices, softmax_scale, attn_sink)
Each is timed as GPU time (the calls captured in one CUDA graph and replayed: no launch gaps; the calls rotate over
index sets that together touch >= 240 MB where they can, so large batches read from HBM, not L2) and eagerly (host
launch included, median of wall-clock loops), and checked against the reference (cosine over all outputs). Bandwidth
counts the selected tokens' cache bytes (584 each) per second, and its share of the device's measured copy bandwidth
(a 2 GiB device-to-device copy, bytes read + written).

    python3 benchmarks/sparse_decode.py [--heads 8,16,64] [--tokens 128,640,2048] [--batch 1,8,32,64,128]
        [--tune] [--peer vllm-rocm:/path/rocm_aiter_mla_sparse.py] [--json out.json]
    python3 benchmarks/sparse_decode.py --defaults-from out.json   # no GPU: today's defaults' times in a --tune run
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
from dsv4rt import kvcache  # noqa: E402
from dsv4rt.sparse_decode import sparse_mla_decode  # noqa: E402
from dsv4rt.sparse_reference import gather_sparse_decode, reference_sparse_decode  # noqa: E402

SCALE = 512 ** -0.5
WINDOW = 128
TOUCH_BYTES = 240e6  # 4x the H200's 60 MB L2
MAX_SETS = 64
STAGES = (1, 3)  # software-pipelining depth of the tile loop (Triton's default is 3)
SPLITS = (1, 2, 4, 8, 16, 32, 64)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def gpu_us(calls, iters: int = 10) -> float:
    """Per-call GPU time: all `calls` captured in one graph, replayed `iters` times between two events."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    for _ in range(2):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / (iters * len(calls))


def eager_us(calls, rounds: int = 5) -> float:
    """Per-call wall time with the host launch included: median of `rounds` loops over the calls."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for call in calls:
            call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6 / len(calls))
    return statistics.median(times)


def copy_bandwidth_gbs(iters: int = 20) -> float:
    """A 2 GiB device-to-device copy timed with events (as benchmarks/kvcache_gather.py), median of iters."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * src.numel() / (statistics.median(times) / 1000) / 1e9


def filled_cache(blocks: int, block_size: int = 64) -> torch.Tensor:
    cache = kvcache.make_cache(blocks, block_size, device="cuda")
    tokens = blocks * block_size
    for start in range(0, tokens, 1 << 20):
        slots = torch.arange(start, min(start + (1 << 20), tokens), device="cuda")
        k = torch.randn(slots.numel(), 512, device="cuda")
        k *= torch.exp2(torch.randint(-4, 3, (slots.numel(), 8), device="cuda").float()).repeat_interleave(64, 1)
        kvcache.write_fp8_ds_mla(k, cache, slots, block_size)
    return cache


# ---- peers ----------------------------------------------------------------------------------------------------------

VLLM_KERNELS = ("_mxfp8_scale_bits", "_mxfp8_quantize_rows", "_sparse_attn_decode_partial_kernel",
                "_sparse_attn_decode_reduce_kernel")


def load_vllm_rocm(path: str):
    """vLLM's ROCm split-K decode kernels, lifted out of its module (which imports half of vLLM) into a file of their
    own that Triton can read the source of."""
    tree = ast.parse(Path(path).read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in VLLM_KERNELS]
    if len(nodes) != len(VLLM_KERNELS):
        raise SystemExit(f"--peer vllm-rocm: {path} lacks some of {', '.join(VLLM_KERNELS)}")
    header = "import torch\nimport triton\nimport triton.language as tl\n\n"
    source = header + "\n\n".join(ast.unparse(n) for n in nodes)
    file = Path(tempfile.mkdtemp()) / "vllm_rocm_sparse_peer.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location("vllm_rocm_sparse_peer", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vllm_rocm_decode(kernels, work: dict, splits: int):
    """One call of vLLM's split-K partial kernel + reduce, as _rocm_sparse_attn_decode_ragged_triton launches them
    on a non-gfx950 ROCm (BLOCK_H 16, BLOCK_K 32, 4 warps), with the ragged indices prepared outside the call."""
    import triton

    q, cache, extra = work["q"], work["cache"], work["extra_cache"]
    batch, heads, _ = q.shape
    has_extra = extra is not None
    extra = cache if extra is None else extra

    def call(index: int):
        main_flat, main_ptr, extra_flat, extra_ptr = work["ragged"][index]
        part_m = torch.empty((batch, splits, heads), dtype=torch.float32, device="cuda")
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty((batch, splits, heads, 512), dtype=torch.float32, device="cuda")
        kernels._sparse_attn_decode_partial_kernel[(batch, splits, triton.cdiv(heads, 16))](
            q, cache, main_flat, main_ptr, extra, extra_flat, extra_ptr, part_m, part_l, part_acc, q.stride(0),
            q.stride(1), cache.stride(0), extra.stride(0), part_m.stride(0), part_m.stride(1), part_acc.stride(0),
            part_acc.stride(1), part_acc.stride(2), cache.shape[0] * cache.shape[1], extra.shape[0] * extra.shape[1],
            cache.shape[1], extra.shape[1], SCALE, heads, HAS_EXTRA=has_extra, NOPE_DIM=448, NOPE_BLOCK=512,
            ROPE_DIM=64, IS_FNUZ_MAIN=False, IS_FNUZ_EXTRA=False, BLOCK_H=16, BLOCK_K=32, NUM_SPLITS=splits,
            NUM_STAGES=1, num_warps=4)
        out = torch.empty((batch, heads, 512), dtype=torch.bfloat16, device="cuda")
        kernels._sparse_attn_decode_reduce_kernel[(batch, heads)](
            part_m, part_l, part_acc, work["sink"], out, None, None, None, out.stride(0), out.stride(1), 0, 512 // 32,
            part_m.stride(0), part_m.stride(1), part_acc.stride(0), part_acc.stride(1), part_acc.stride(2), 0, heads,
            HAS_ATTN_SINK=True, ADAPTIVE_SPLITS=False, COMB_DIM=512, BLOCK_H=1, NUM_SPLITS=splits,
            SPLITS_PAD=triton.next_power_of_2(splits), FUSE_INV_ROPE=False, NOPE=448, HALF=32, QUANT_OUT=False,
            num_warps=4)
        return out

    return call


def load_peer(spec: str):
    """(name, configs(work) -> [(label, call(index))]) for one --peer."""
    if spec.startswith("vllm-rocm:"):
        kernels = load_vllm_rocm(spec.split(":", 1)[1])
        return "vllm-rocm", lambda work: [(f"S{s}", vllm_rocm_decode(kernels, work, s)) for s in (1, 2, 4, 8, 16)]
    file, _, name = spec.rpartition(":")
    loaded = importlib.util.spec_from_file_location("peer_" + Path(file).stem, file)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    fn = getattr(module, name)
    return name, lambda work: [("", lambda i: fn(work["q"], work["cache"], work["sets"][i][0], work["extra_cache"],
                                                  work["sets"][i][1], SCALE, work["sink"]))]


# ---- one shape ------------------------------------------------------------------------------------------------------


def workload(heads: int, tokens: int, batch: int, cache, extra_cache, g: torch.Generator) -> dict:
    window, compressed = min(tokens, WINDOW), max(tokens - WINDOW, 0)
    per_call = batch * tokens * kvcache.LOGICAL_TOKEN_BYTES
    sets = []
    for _ in range(max(1, min(MAX_SETS, int(TOUCH_BYTES // per_call)))):
        main = torch.randint(0, cache.shape[0] * 64, (batch, window), generator=g, dtype=torch.int32).cuda()
        extra = (torch.randint(0, extra_cache.shape[0] * 64, (batch, compressed), generator=g, dtype=torch.int32)
                 .cuda() if compressed else None)
        sets.append((main, extra))
    ragged = []
    for main, extra in sets:
        step = lambda width: torch.arange(batch + 1, device="cuda", dtype=torch.int32) * width  # noqa: E731
        empty = torch.empty(0, dtype=torch.int32, device="cuda")
        ragged.append((main.reshape(-1), step(window), empty if extra is None else extra.reshape(-1),
                       step(compressed) if extra is not None else step(0)))
    q = (torch.randn(batch, heads, 512, generator=g) * 0.05).to(torch.bfloat16).cuda()
    return {"q": q, "cache": cache, "extra_cache": extra_cache if compressed else None, "sets": sets,
            "ragged": ragged, "sink": torch.randn(heads, generator=g).cuda(), "bytes": per_call}


def path_call(fn, work: dict, **options):
    def call(index: int):
        main, extra = work["sets"][index]
        return fn(work["q"], work["cache"], main, extra_cache=work["extra_cache"], extra_indices=extra,
                  softmax_scale=SCALE, attn_sink=work["sink"], **options)[0]

    return call


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def measure(call, work: dict, want: torch.Tensor, eager: bool = True) -> dict:
    n = len(work["sets"])
    calls = [lambda i=i: call(i) for i in range(n)]
    result = {"gpu_us": gpu_us(calls), "cosine": cosine(call(0), want)}
    if eager:
        result["eager_us"] = eager_us(calls)
    return result


def fused_configs(work: dict, tune: bool) -> list[tuple[str, dict]]:
    if not tune:
        return []
    tokens = work["sets"][0][0].shape[1] + (work["sets"][0][1].shape[1] if work["sets"][0][1] is not None else 0)
    out = []
    for block_n in (16, 32):  # 64 needs 247 KB of shared memory on the H200 (over its 227 KB)
        for warps in (4, 8):
            for stages in STAGES:
                for splits in SPLITS:
                    if splits <= max(1, -(-tokens // block_n)):
                        out.append((f"n{block_n}/w{warps}/s{stages}/S{splits}",
                                    {"block_n": block_n, "num_warps": warps, "num_stages": stages,
                                     "num_splits": splits}))
    return out


def best(call_configs, work: dict, want: torch.Tensor) -> dict:
    results = []
    for label, call in call_configs:
        r = measure(call, work, want, eager=False)
        results.append({**r, "config": label, "call": call})
    top = min(results, key=lambda r: r["gpu_us"])
    top.update(eager_us=eager_us([lambda i=i: top["call"](i) for i in range(len(work["sets"]))]),
               worst_cosine=min(r["cosine"] for r in results),
               sweep={r["config"]: round(r["gpu_us"], 2) for r in results})
    del top["call"]
    return top


def run_shape(heads, tokens, batch, caches, peers, tune, g) -> dict:
    work = workload(heads, tokens, batch, *caches, g)
    want = path_call(reference_sparse_decode, work)(0).float()
    row = {"heads": heads, "tokens": tokens, "batch": batch, "bytes": work["bytes"], "sets": len(work["sets"])}
    row["reference"] = measure(path_call(reference_sparse_decode, work), work, want)
    row["gather"] = measure(path_call(gather_sparse_decode, work), work, want)
    row["fused"] = measure(path_call(sparse_mla_decode, work), work, want)
    row["fused"]["resources"] = resources(work)
    configs = fused_configs(work, tune)
    if configs:
        row["fused_best"] = best([(label, path_call(sparse_mla_decode, work, **opt)) for label, opt in configs],
                                 work, want)
    for name, configs_of in peers:
        row[name] = best(configs_of(work), work, want)
    return row


def resources(work: dict, **options) -> str:
    """Registers, spills and shared memory of the fused kernel as compiled for this shape and options."""
    from dsv4rt import sparse_decode

    path_call(sparse_mla_decode, work, **options)(0)
    k = sparse_decode.LAUNCHED.get("partial")
    shared = getattr(getattr(k, "metadata", None), "shared", None)
    return f"regs {getattr(k, 'n_regs', '?')}, spills {getattr(k, 'n_spills', '?')}, shared {shared} B"


def summary(row: dict, copy_gbs: float, peer_names: list[str]) -> str:
    fused = row.get("fused_best", row["fused"])
    gbs = row["bytes"] / (fused["gpu_us"] / 1e6) / 1e9
    cols = [f"{row['heads']:>3} {row['tokens']:>5} {row['batch']:>4}",
            f"{row['reference']['gpu_us']:>8.1f} {row['gather']['gpu_us']:>8.1f} {row['fused']['gpu_us']:>8.1f}",
            f"{fused['gpu_us']:>8.1f} {fused.get('config', 'default'):>15}"]
    for name in peer_names:
        cols.append(f"{row[name]['gpu_us']:>8.1f} {row[name].get('config', ''):>4}")
    cols.append(f"{row['gather']['gpu_us'] / fused['gpu_us']:>6.2f}x {gbs:>7.0f} {gbs / copy_gbs:>5.0%}")
    cols.append(f"{row['fused']['eager_us']:>7.1f} {row['gather']['eager_us']:>7.1f}")
    keys = ("gather", "fused", *peer_names, *(["fused_best"] if "fused_best" in row else []))
    worst = min(row[k].get("worst_cosine", row[k]["cosine"]) for k in keys)
    cols.append(f"{worst:.6f}  [{row['fused']['resources']}]")
    return " ".join(cols)


def defaults_from(path: Path, multiprocessors: int) -> int:
    """No GPU: for each shape of a recorded --tune run, the config today's defaults pick there and its time in
    that run's sweep (how the defaults are read off a sweep without spending device time on a second run)."""
    from dsv4rt import sparse_decode

    data = json.loads(path.read_text())
    programs = 2 * multiprocessors
    print(f"defaults for {multiprocessors} multiprocessors against {path.name} (copy {data['copy_gbs']:.0f} GB/s)")
    print("  H     T    B           config  default us  best us  vllm-rocm us  x gather  GB/s  copy%")
    for row in data["rows"]:
        sweep = row.get("fused_best", {}).get("sweep")
        if not sweep:
            continue
        heads, width, batch = row["heads"], row["tokens"], row["batch"]
        block_h = max(16, min(1 << (heads - 1).bit_length(), sparse_decode.MAX_HEADS_PER_PROGRAM))
        blocks = -(-heads // block_h)
        block_n = sparse_decode.choose_block_n(batch, blocks, width, programs)
        splits = sparse_decode.choose_splits(batch, blocks, max(1, -(-width // block_n)), programs)
        warps = 4 if block_h <= 16 else 8
        label = f"n{block_n}/w{warps}/s1/S{splits}"
        us = sweep.get(label)
        if us is None:
            print(f"{heads:>3} {width:>5} {batch:>4} {label:>16}  not in the sweep")
            continue
        gbs = row["bytes"] / (us / 1e6) / 1e9
        peer = row.get("vllm-rocm", {}).get("gpu_us", float("nan"))
        print(f"{heads:>3} {width:>5} {batch:>4} {label:>16} {us:>11.1f} {row['fused_best']['gpu_us']:>8.1f} "
              f"{peer:>13.1f} {row['gather']['gpu_us'] / us:>8.2f}x {gbs:>5.0f} {gbs / data['copy_gbs']:>5.0%}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heads", type=_ints, default=[8, 16, 64])
    parser.add_argument("--tokens", type=_ints, default=[128, 640, 2048])
    parser.add_argument("--batch", type=_ints, default=[1, 8, 32, 64, 128])
    parser.add_argument("--peer", action="append", default=[])
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--defaults-from", type=Path, help="a --tune run's --json: the current defaults' times in it")
    parser.add_argument("--multiprocessors", type=int, default=132, help="with --defaults-from (H200: 132)")
    args = parser.parse_args()
    if args.defaults_from:
        return defaults_from(args.defaults_from, args.multiprocessors)
    if not torch.cuda.is_available():
        print("no GPU: this benchmark needs one")
        return 2
    import triton

    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    copy_gbs = copy_bandwidth_gbs()
    print(f"device copy bandwidth (read + write): {copy_gbs:.0f} GB/s")
    caches = (filled_cache(4096), filled_cache(16384))
    print(f"caches: SWA {caches[0].shape[0]} blocks, compressed {caches[1].shape[0]} blocks of 64, block stride "
          f"{caches[0].stride(0)} B")
    peers = [load_peer(spec) for spec in args.peer]
    names = [name for name, _ in peers]
    print("GPU time in us per call (CUDA graph); 'best' = fused at its best block_n/warps/splits; x = gather/best;"
          " GB/s = cache bytes / best; eager in us (host launch included)")
    print("  H     T    B      ref   gather    fused     best          config " + " ".join(f"{n:>13}" for n in names)
          + "   x/gat    GB/s  copy%  e-fused e-gather  min-cos")
    rows = []
    for heads in args.heads:
        for tokens in args.tokens:
            for batch in args.batch:
                row = run_shape(heads, tokens, batch, caches, peers, args.tune, g)
                rows.append(row)
                print(summary(row, copy_gbs, names), flush=True)
                if "fused_best" in row:
                    ranked = sorted(row["fused_best"]["sweep"].items(), key=lambda kv: kv[1])
                    print("      sweep: " + ", ".join(f"{k} {v:.1f}" for k, v in ranked[:8]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy_gbs, "device": torch.cuda.get_device_name(),
                                         "torch": torch.__version__, "triton": triton.__version__, "rows": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
