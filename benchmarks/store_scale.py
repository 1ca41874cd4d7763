"""Issue 25: how the read commands scale with a year of runs. Builds results databases of 1k, 100k (and 1M) runs
through the store's own API (one transaction per campaign: `with store.transaction()` joins every add_run and
save_verdict of it), each run a copy of one real verdict (J17's, judged once) with its own metrics, over campaigns of
100 runs (A/B pairs of two experiments, a commit per campaign), then times every read command as a user runs it
(a fresh `dsv4ctl` process, best of 3 wall times).

    .venv/bin/python benchmarks/store_scale.py --runs 1000 100000 [--keep DIR]

Prints one table per size; docs/database.md holds the figures measured on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DSV4CTL = [str(ROOT / ".venv" / "bin" / "dsv4ctl")]
PER_CAMPAIGN = 100


def real_verdict() -> dict:
    done = subprocess.run([*DSV4CTL, "verdict", str(ROOT / "tests" / "fixtures" / "logs" / "J17.log"), "--json"],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def build(path: Path, runs: int, verdict: dict) -> float:
    sys.path.insert(0, str(ROOT))
    from dsv4ctl.store import open_store

    started = time.perf_counter()
    store = open_store(path)
    rng = random.Random(25)
    base = store.experiment_id("dsv4-baseline", "h-base", json.dumps({"name": "dsv4-baseline"}), "bench")
    cand = store.experiment_id("dsv4-candidate", "h-cand", json.dumps({"name": "dsv4-candidate"}), "bench")
    for c in range(runs // PER_CAMPAIGN):
        with store.transaction():
            campaign = store.create_campaign(f"ab-{c:05d}", "slurm", "dsv4ctl submit --ab base.yaml cand.yaml",
                                             planned_runs=PER_CAMPAIGN)
            for i in range(PER_CAMPAIGN):
                side = "baseline" if i % 2 == 0 else "candidate"
                run = store.add_run(
                    campaign_id=campaign, experiment_id=base if side == "baseline" else cand, pair_id=i // 2,
                    side=side, backend="slurm", token=f"{c:05d}{i:03d}{rng.getrandbits(32):08x}", state="COMPLETED",
                    state_source="sacct", job_id=f"{100000 + c}_{i}", run_dir=f"/proj/runs/ab-{c:05d}/{i}",
                    log_path=f"/proj/runs/ab-{c:05d}/{i}/raw.log", node="gpu01", exit_code=0, signal=0,
                    elapsed_s=300 + i, max_rss_kib=4_000_000, submitted_at=f"2026-{1 + c * 12 // (runs // 100):02d}"
                    f"-15T10:00:00+00:00", point_json="{}", repeat_index=i // 2, git_sha=f"{c // 10:07x}",
                    switches_json="{}", tags="", ingested=0, dsv4ctl_version="0.9")
                metrics = {"gen_s": rng.gauss(10.0 if side == "baseline" else 9.5, 0.2), "prompt_tokens": 512,
                           "output_tokens": 128}
                store.save_verdict(run, {**verdict, "metrics": metrics}, {})
    store.close()
    return time.perf_counter() - started


COMMANDS = [
    ("runs",), ("runs", "--json"), ("runs", "--campaign", "latest"), ("runs", "--status", "coherent"),
    ("runs", "--since", "7d"), ("campaigns",), ("status",), ("show", "latest"),
    ("compare", "campaign:ab-00000", "campaign:ab-00001"), ("history", "dsv4-candidate"),
    ("report", "latest", "--json"),
]


def time_commands(path: Path) -> dict[str, float]:
    out = {}
    for command in COMMANDS:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            done = subprocess.run([*DSV4CTL, *command, "--db", str(path)], capture_output=True, text=True)
            best = min(best, time.perf_counter() - started)
            if done.returncode not in (0, 1, 5):
                raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-500:]}")
        out[" ".join(command)] = best
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 100000])
    parser.add_argument("--keep", type=Path, help="build the databases here and keep them")
    args = parser.parse_args()
    verdict = real_verdict()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="store_scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = {}
    for n in args.runs:
        path = folder / f"runs-{n}.db"
        if not path.exists():
            seconds = build(path, n, verdict)
            print(f"built {path} ({n} runs) in {seconds:.0f} s, {path.stat().st_size / 2**20:.0f} MiB", flush=True)
        results[n] = time_commands(path)
        print(f"{n} runs: " + ", ".join(f"{k} {v:.2f} s" for k, v in results[n].items()), flush=True)
    sizes = list(results)
    print("| command | " + " | ".join(f"{n:,} runs" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for command in results[sizes[0]]:
        print(f"| `dsv4ctl {command}` | " + " | ".join(f"{results[n][command]:.2f} s" for n in sizes) + " |")


if __name__ == "__main__":
    main()
