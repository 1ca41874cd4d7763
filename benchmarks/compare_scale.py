"""Benchmark: `compare` over N stored samples per side (issue 6: 10,000 per side in under 0.5 s).

Builds a temporary store with N judged runs per side (j17-baseline vs q1-off, gen_s around 101.3 s and 67.9 s),
then times `dsv4ctl.analysis.compare.compare` in-process (median of --repeat calls; the store is warm).

    .venv/bin/python benchmarks/compare_scale.py [--n 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsv4ctl.analysis.compare import compare  # noqa: E402
from dsv4ctl.spec.load import load_spec  # noqa: E402
from dsv4ctl.store import open_store  # noqa: E402


def fill(store, spec_file: str, centre: float, n: int, rng: random.Random) -> None:
    spec = load_spec(ROOT / "experiments" / spec_file)[0].spec
    experiment = store.experiment_id(spec.name, spec.spec_hash(), json.dumps(spec.snapshot()), spec_file)
    switches = json.dumps(spec.resolved_switches())
    verdict = json.dumps({"status": "coherent", "passed": True, "requests": [{"token_ids": [1, 2, 3]}]})
    with store.transaction():
        first = store.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM runs").fetchone()[0]
        store.db.conn.executemany(
            "INSERT INTO runs (id, experiment_id, backend, token, state, ingested, switches_json, dsv4ctl_version,"
            " node) VALUES (?, ?, 'slurm', ?, 'COMPLETED', 0, ?, '0.1.0', 'node01')",
            [(first + i, experiment, f"{spec.name}-{i}", switches) for i in range(n)])
        store.db.conn.executemany(
            "INSERT INTO verdicts (run_id, status, passed, false_green, verdict_json) VALUES (?, 'coherent', 1, 0, ?)",
            [(first + i, verdict) for i in range(n)])
        store.db.conn.executemany("INSERT INTO metrics (run_id, name, value) VALUES (?, 'gen_s', ?)",
                                  [(first + i, rng.gauss(centre, centre * 0.03)) for i in range(n)])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        rng = random.Random(0)
        fill(store, "j17-baseline.yaml", 101.3, args.n, rng)
        fill(store, "q1-off.yaml", 67.9, args.n, rng)
        compare(store, "j17-baseline", "q1-off")  # warm caches and imports (scipy)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = compare(store, "j17-baseline", "q1-off")
            times.append(time.perf_counter() - start)
        print(f"{args.n} samples per side: compare took {statistics.median(times):.3f} s "
              f"(median of {args.repeat}; target < 0.5 s); decision {result.decision}, p = {result.metrics[0].p_value:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
