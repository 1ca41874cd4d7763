"""Benchmark: wall time of `dsv4ctl --help` against `python -c "import typer"` (issue 2: under 1.5x).

    .venv/bin/python benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


# As a user's install runs: with bytecode (PYTHONDONTWRITEBYTECODE=1 makes an editable dsv4ctl compile every start).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def median_wall(cmd: list[str], runs: int) -> float:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    typer_s = median_wall([sys.executable, "-c", "import typer"], args.runs)
    help_s = median_wall([sys.executable, "-m", "dsv4ctl.cli", "--help"], args.runs)
    print(f"python -c 'import typer': {typer_s * 1000:.0f} ms (median of {args.runs})")
    print(f"dsv4ctl --help:           {help_s * 1000:.0f} ms")
    print(f"ratio: {help_s / typer_s:.2f} (target < 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
