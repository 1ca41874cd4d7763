"""Benchmark: `dsv4ctl verdict` on a large raw log against `grep -cE` with five patterns on the same file.

Builds a log of --size MiB (default 512) shaped like a long DeepSeek V4 run: the J17 fixture's engine start, then
a long decode phase of vLLM worker lines, progress bars, per-rank diagnostics every few hundred lines and a usage
thread traceback, then the results and shutdown noise. Prints the verdict's wall time, grep's, their ratio and the
verdict's peak memory. Target (issue 3): ratio <= 2.0, peak <= 100 MiB.

    .venv/bin/python benchmarks/verdict_scan.py [--size 512] [--runs 3] [--keep PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "logs" / "J17.log"
GREP_PATTERNS = "### STAGE:|TOKEN_IDS|Traceback|PY_EXIT=|DSV4_VERDICT"

DECODE_LINES = [
    "(Worker_TP{r} pid=51{r:02d}) INFO 08-24 10:{m:02d}:{s:02d} [gpu_model_runner.py:2711] decode step {n}: "
    "1 request(s), num_scheduled_tokens=1, kv blocks in use 12/35644",
    "(EngineCore_DP0 pid=4990) DEBUG 08-24 10:{m:02d}:{s:02d} [core.py:411] scheduler step {n} took 0.{r}83 ms, "
    "waiting 0, running 1",
    "(Worker_TP{r} pid=51{r:02d}) DEBUG 08-24 10:{m:02d}:{s:02d} [rocm_aiter_mla_sparse.py:512] sparse decode: "
    "topk=2048 indices={n} block_table_stride=(64, 1) workspace reuse hit",
    "INFO 08-24 10:{m:02d}:{s:02d} [metrics.py:98] Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%",
    "Processed prompts:   0%|          | 0/1 [00:{s:02d}<?, ?it/s, est. speed input: 0.00 toks/s, output: "
    "0.00 toks/s]\rProcessed prompts:   0%|          | 0/1 [00:{s:02d}<?, ?it/s]",
    "(Worker_TP{r} pid=51{r:02d}) WARNING 08-24 10:{m:02d}:{s:02d} [fused_moe.py:1200] MXFP4 emulation path "
    "active for layer {n}; native kernel unavailable on gfx936",
]
DIAG = "(Worker_TP{r} pid=51{r:02d}) [DSV4_DIAG] logits_finite = True"


def build_log(path: Path, size_mib: int) -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    head, _, tail = text.partition("### STAGE: generate\n")
    results = tail[tail.index("TOKEN_IDS"):]
    rng = random.Random(17)
    target = size_mib << 20
    with open(path, "w", encoding="utf-8") as out:
        out.write(head + "### STAGE: generate\n")
        written = len(head)
        n = 0
        while written < target:
            lines = []
            for _ in range(4000):
                n += 1
                r, m, s = n % 8, (n // 600) % 60, (n // 10) % 60
                lines.append((DIAG if n % 400 == 0 else rng.choice(DECODE_LINES)).format(r=r, m=m, s=s, n=n))
            block = "\n".join(lines) + "\n"
            out.write(block)
            written += len(block)
        out.write(results)


def timed(cmd: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and exit code of one run of `cmd`."""
    start = time.perf_counter()
    # Read the output through a pipe: GNU grep stops at the first match when stdout is /dev/null.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss, os.waitstatus_to_exitcode(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512, help="log size in MiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the log here and keep it")
    args = parser.parse_args()
    path = args.keep or Path(tempfile.mkdtemp()) / "big.log"
    if not path.exists() or path.stat().st_size < (args.size << 20):
        build_log(path, args.size)
    size = path.stat().st_size
    dsv4ctl = [sys.executable, "-m", "dsv4ctl.cli", "verdict", "--log", str(path), "--json"]
    grep = ["grep", "-cE", GREP_PATTERNS, str(path)]
    timed(grep)  # warm the page cache
    verdict_runs = [timed(dsv4ctl) for _ in range(args.runs)]
    grep_runs = [timed(grep) for _ in range(args.runs)]
    v_time = statistics.median(t for t, _, _ in verdict_runs)
    g_time = statistics.median(t for t, _, _ in grep_runs)
    peak = max(rss for _, rss, _ in verdict_runs)
    print(f"log: {size / 2**20:.0f} MiB, {args.runs} runs each, medians")
    print(f"verdict: {v_time:.2f} s ({size / 2**20 / v_time:.0f} MiB/s), exit {verdict_runs[0][2]}")
    print(f"grep -cE (5 patterns): {g_time:.2f} s")
    print(f"ratio verdict/grep: {v_time / g_time:.2f} (target <= 2.0)")
    print(f"verdict peak RSS: {peak / 1024:.0f} MiB (target <= 100)")
    if not args.keep:
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
