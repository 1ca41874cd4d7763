"""Benchmark: `dsv4ctl verdict` on large raw logs against `grep -cE` with five patterns on the same file.

Builds logs of --size MiB (default 512), each a passing run (the J17 fixture's engine start, a long middle, then
J17's results and PY_EXIT=0), in three shapes of middle:
  decode     a long decode phase: vLLM worker lines, progress bars, a diagnostic every 400 lines (few anchors)
  debug      debug-heavy: every line a `[DSV4_SPARSE_DEBUG]` worker line (the report's J14-J16 debug runs)
  infospam   every line vLLM's `Engine 000: Avg prompt throughput: ...` logger line from EngineCore
Prints, per shape, the verdict's wall time, grep's, their ratio, the verdict's peak memory and whether the verdict
passed. Targets (issue 11): ratio <= 2.0 and peak <= 100 MiB on every shape.

    .venv/bin/python benchmarks/verdict_scan.py [--size 512] [--runs 3] [--shape decode|debug|infospam|all]
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
DEBUG_LINES = [
    "(Worker_TP{r} pid=51{r:02d}) [DSV4_SPARSE_DEBUG] layer={l} step={n} q_shape=(1, 64, 576) topk_idx[0:4]="
    "[{a}, {b}, {c}, {d}] kv_slots=[{n}, {a}] block_table_stride=(64, 1)",
    "(Worker_TP{r} pid=51{r:02d}) [DSV4_SPARSE_DEBUG] layer={l} step={n} indexer_scores max={a}.{b} min=-{c}.{d} "
    "nope_absmax=3.{a} scale_byte={b}",
]
SPAM_LINE = ("(EngineCore_DP0 pid=4990) INFO 08-24 10:{m:02d}:{s:02d} [loggers.py:{l}] Engine 000: Avg prompt "
             "throughput: 0.0 tokens/s, Avg generation throughput: {a}.{b} tokens/s, Running: 8 reqs, Waiting: 0 "
             "reqs, GPU KV cache usage: 0.{c}%, Prefix cache hit rate: 0.0%")
SHAPES = ("decode", "debug", "infospam")


def middle_line(shape: str, n: int, rng: random.Random) -> str:
    r, m, s = n % 8, (n // 600) % 60, (n // 10) % 60
    if shape == "debug":
        return rng.choice(DEBUG_LINES).format(r=r, n=n, l=n % 61, a=n % 997, b=n % 89, c=n % 7919, d=n % 13)
    if shape == "infospam":
        return SPAM_LINE.format(m=m, s=s, l=100 + n % 50, a=n % 97, b=n % 10, c=n % 100)
    return (DIAG if n % 400 == 0 else rng.choice(DECODE_LINES)).format(r=r, m=m, s=s, n=n)


def build_log(path: Path, size_mib: int, shape: str) -> None:
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
                lines.append(middle_line(shape, n, rng))
            block = "\n".join(lines) + "\n"
            out.write(block)
            written += len(block)
        out.write(results)


# As a user's install runs: with bytecode. (Some machines export PYTHONDONTWRITEBYTECODE=1; without .pyc files an
# editable dsv4ctl compiles its modules on every start, ~0.1 s of the verdict's 0.2 s start-up.)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and exit code of one run of `cmd`."""
    start = time.perf_counter()
    # Read the output through a pipe: GNU grep stops at the first match when stdout is /dev/null.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss, os.waitstatus_to_exitcode(status)


def bench(shape: str, size_mib: int, runs: int, keep: Path | None) -> dict:
    path = keep.with_name(f"{keep.stem}-{shape}{keep.suffix}") if keep else Path(tempfile.mkdtemp()) / "big.log"
    if not path.exists() or path.stat().st_size < (size_mib << 20):
        build_log(path, size_mib, shape)
    size = path.stat().st_size
    dsv4ctl = [sys.executable, "-m", "dsv4ctl.cli", "verdict", "--log", str(path), "--json"]
    grep = ["grep", "-cE", GREP_PATTERNS, str(path)]
    timed(grep)  # warm the page cache
    timed([sys.executable, "-m", "dsv4ctl.cli", "verdict", "--log", str(FIXTURE), "--json"])  # and the bytecode
    verdict_runs = [timed(dsv4ctl) for _ in range(runs)]
    grep_runs = [timed(grep) for _ in range(runs)]
    if not keep:
        path.unlink()
    v_time = statistics.median(t for t, _, _ in verdict_runs)
    g_time = statistics.median(t for t, _, _ in grep_runs)
    return {"shape": shape, "mib": size / 2**20, "verdict_s": v_time, "grep_s": g_time, "ratio": v_time / g_time,
            "peak_mib": max(rss for _, rss, _ in verdict_runs) / 1024, "exit": verdict_runs[0][2]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512, help="log size in MiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    parser.add_argument("--keep", type=Path, help="build the logs beside this path and keep them")
    args = parser.parse_args()
    shapes = SHAPES if args.shape == "all" else (args.shape,)
    print(f"{args.runs} runs each, medians; targets: ratio <= 2.0, peak <= 100 MiB, verdict passed (exit 0)")
    worst = 0.0
    for shape in shapes:
        r = bench(shape, args.size, args.runs, args.keep)
        worst = max(worst, r["ratio"])
        print(f"{shape:9s} {r['mib']:.0f} MiB: verdict {r['verdict_s']:.2f} s ({r['mib'] / r['verdict_s']:.0f} MiB/s), "
              f"grep -cE {r['grep_s']:.2f} s, ratio {r['ratio']:.2f}, peak RSS {r['peak_mib']:.0f} MiB, "
              f"verdict exit {r['exit']}")
    print(f"worst ratio: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
