"""Issue 25: how the read commands scale with a year of runs. Builds results databases of 1k, 100k (and 1M) runs
through the store's own API (one transaction per campaign: `with store.transaction()` joins every add_run and
save_verdict of it), each run a copy of one real verdict (J17's, judged once) with its own metrics, over campaigns of
100 runs (A/B pairs of two experiments, a commit per campaign), then times every read command as a user runs it
(a fresh `dsv4ctl` process, best of 3 wall times).

    .venv/bin/python benchmarks/store_scale.py --runs 1000 100000 [--keep DIR] [--bulk]

`--bulk` writes the same rows with executemany in transactions of 100 campaigns (the store creates and migrates
the file first; the rows are the ones add_run and save_verdict write): 1M runs in minutes instead of half an hour.

Prints one table per size; docs/database.md holds the figures measured on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
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
                fields = _run_fields(c, i, runs, base, cand, rng)
                run = store.add_run(campaign_id=campaign, **fields)
                metrics = {"gen_s": rng.gauss(10.0 if fields["side"] == "baseline" else 9.5, 0.2), "prompt_tokens": 512,
                           "output_tokens": 128}
                store.save_verdict(run, {**verdict, "metrics": metrics}, {})
    store.close()
    return time.perf_counter() - started


def _run_fields(c: int, i: int, runs: int, base: int, cand: int, rng: random.Random) -> dict:
    side = "baseline" if i % 2 == 0 else "candidate"
    return dict(
        experiment_id=base if side == "baseline" else cand, pair_id=i // 2,
        side=side, backend="slurm", token=f"{c:05d}{i:03d}{rng.getrandbits(32):08x}", state="COMPLETED",
        state_source="sacct", job_id=f"{100000 + c}_{i}", run_dir=f"/proj/runs/ab-{c:05d}/{i}",
        log_path=f"/proj/runs/ab-{c:05d}/{i}/raw.log", node="gpu01", exit_code=0, signal=0,
        elapsed_s=300 + i, max_rss_kib=4_000_000, submitted_at=f"2026-{1 + c * 12 // (runs // 100):02d}"
        f"-15T10:00:00+00:00", point_json="{}", repeat_index=i // 2, git_sha=f"{c // 10:07x}",
        switches_json="{}", tags="", ingested=0, dsv4ctl_version="0.9")


def build_bulk(path: Path, runs: int, verdict: dict) -> float:
    """The rows build() writes, by executemany in transactions of 100 campaigns (10,000 runs)."""
    sys.path.insert(0, str(ROOT))
    from dsv4ctl.store import open_store, now

    started = time.perf_counter()
    store = open_store(path)
    rng = random.Random(25)
    base = store.experiment_id("dsv4-baseline", "h-base", json.dumps({"name": "dsv4-baseline"}), "bench")
    cand = store.experiment_id("dsv4-candidate", "h-cand", json.dumps({"name": "dsv4-candidate"}), "bench")
    conn = store.db.conn
    blocker = verdict.get("first_blocker") or {}
    run_id = conn.execute("SELECT coalesce(max(id), 0) FROM runs").fetchone()[0]
    campaigns = runs // PER_CAMPAIGN
    for first in range(0, campaigns, 100):
        run_rows, verdict_rows, metric_rows = [], [], []
        with store.transaction():
            for c in range(first, min(first + 100, campaigns)):
                campaign = conn.execute(
                    "INSERT INTO campaigns (name, backend, command, created_at, planned_runs) VALUES (?, ?, ?, ?, ?)",
                    [f"ab-{c:05d}", "slurm", "dsv4ctl submit --ab base.yaml cand.yaml", now(), PER_CAMPAIGN]).lastrowid
                for i in range(PER_CAMPAIGN):
                    run_id += 1
                    fields = _run_fields(c, i, runs, base, cand, rng)
                    run_rows.append({"id": run_id, "campaign_id": campaign, "label": f"r{run_id}",
                                     "updated_at": now(), **fields})
                    metrics = {"gen_s": rng.gauss(10.0 if fields["side"] == "baseline" else 9.5, 0.2),
                               "prompt_tokens": 512, "output_tokens": 128}
                    text = json.dumps({**verdict, "metrics": metrics}, ensure_ascii=False)
                    verdict_rows.append((run_id, verdict["status"], int(verdict["passed"]), int(verdict["false_green"]),
                                         blocker.get("line"), blocker.get("kind"), blocker.get("message"),
                                         verdict.get("bos_run"), verdict.get("py_exit"), verdict.get("probe_verdict"),
                                         verdict.get("engine_ready_s"), now(), text))
                    numbers = {**metrics, "engine_ready_s": verdict.get("engine_ready_s")}
                    metric_rows += [(run_id, k, float(v)) for k, v in numbers.items() if v is not None]
            names = list(run_rows[0])
            conn.executemany(f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                             [[r[n] for n in names] for r in run_rows])
            conn.executemany("INSERT INTO verdicts (run_id, status, passed, false_green, first_blocker_line, "
                             "first_blocker_kind, first_blocker_message, bos_run, py_exit, probe_verdict, "
                             "engine_ready_s, judged_at, verdict_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             verdict_rows)
            conn.executemany("INSERT INTO metrics (run_id, name, value) VALUES (?, ?, ?)", metric_rows)
    store.close()
    return time.perf_counter() - started


COMMANDS = [
    ("runs",), ("runs", "--json"), ("runs", "--campaign", "latest"), ("runs", "--status", "coherent"),
    ("runs", "--since", "7d"), ("campaigns",), ("status",), ("show", "latest"),
    ("compare", "campaign:ab-00000", "campaign:ab-00001"), ("history", "dsv4-candidate"),
    ("report", "latest", "--json"),
]


def _migrate(path: Path) -> tuple[float, list[str]] | None:
    """Open the database once before timing, so a migration this dsv4ctl adds is not counted as a read."""
    sys.path.insert(0, str(ROOT))
    from dsv4ctl.store import open_store

    started = time.perf_counter()
    store = open_store(path)
    store.close()
    return (time.perf_counter() - started, store.applied) if store.applied else None


def time_commands(path: Path) -> dict[str, tuple[float, float]]:
    """Each command's best wall time of 3 and its best CPU time (user + system of the dsv4ctl process): on a
    shared machine the wall time moves with the others' load, the CPU time much less. Python may write its
    bytecode (a session with PYTHONDONTWRITEBYTECODE=1 would otherwise compile every edited module each run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: bytecode cached
    out = {}
    for command in COMMANDS:
        best, best_cpu = float("inf"), float("inf")
        for _ in range(3):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run([*DSV4CTL, *command, "--db", str(path)], capture_output=True, text=True, env=env)
            best = min(best, time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            best_cpu = min(best_cpu, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if done.returncode not in (0, 1, 5):
                raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-500:]}")
        out[" ".join(command)] = (best, best_cpu)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 100000])
    parser.add_argument("--keep", type=Path, help="build the databases here and keep them")
    parser.add_argument("--bulk", action="store_true", help="write rows by executemany (the 1M database)")
    args = parser.parse_args()
    verdict = real_verdict()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="store_scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = {}
    for n in args.runs:
        path = folder / f"runs-{n}.db"
        if not path.exists():
            seconds = (build_bulk if args.bulk else build)(path, n, verdict)
            print(f"built {path} ({n} runs) in {seconds:.0f} s, {path.stat().st_size / 2**20:.0f} MiB", flush=True)
        migrated = _migrate(path)
        if migrated:
            print(f"migrated {path} ({', '.join(migrated[1])}) in {migrated[0]:.1f} s", flush=True)
        results[n] = time_commands(path)
        print(f"{n} runs: " + ", ".join(f"{k} {wall:.2f} s (cpu {cpu:.2f})" for k, (wall, cpu) in results[n].items()),
              flush=True)
    sizes = list(results)
    print("wall time, best of 3 (CPU time of the process, best of 3)")
    print("| command | " + " | ".join(f"{n:,} runs" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for command in results[sizes[0]]:
        print(f"| `dsv4ctl {command}` | " + " | ".join("{:.2f} s ({:.2f})".format(*results[n][command]) for n in sizes)
              + " |")


if __name__ == "__main__":
    main()
