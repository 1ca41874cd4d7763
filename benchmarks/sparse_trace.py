"""Capture (GPU): a torch.profiler trace of a few calls of the fused sparse-MLA decode (issue 27), gzipped.

    python3 benchmarks/sparse_trace.py OUT.pt.trace.json.gz [--heads 8] [--tokens 640] [--batch 64] [--iters 3]

Builds the benchmark's caches and one index set (benchmarks/sparse_decode.py), warms the kernel up (compiles), then
records `iters` calls with CPU and CUDA activity and writes the Chrome trace, gzipped; prints the per-kernel table.
"""
import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))
import sparse_decode as bench  # noqa: E402
from dsv4rt.sparse_decode import sparse_mla_decode  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=640)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    caches = (bench.filled_cache(256), bench.filled_cache(1024))
    work = bench.workload(args.heads, args.tokens, args.batch, *caches, g)
    call = bench.path_call(sparse_mla_decode, work)
    for _ in range(3):
        call(0)
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(args.iters):
            with torch.profiler.record_function(f"sparse_mla_decode#{i}"):
                call(i % len(work["sets"]))
        torch.cuda.synchronize()
    raw = Path(tempfile.mkdtemp()) / "trace.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(args.out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    try:
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=12))
    except (KeyError, ValueError, AttributeError):
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
    print(f"{args.out}: {args.out.stat().st_size} bytes gzipped ({raw.stat().st_size} raw)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
