"""Import the raw log of an earlier run (the report's jobs, runs made by hand) into the store."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .errors import Dsv4Error
from .judge.files import judge_files
from .store import Store, now
from .switches import BY_NAME
from .judge.rules import Verdict


def parse_switches(pairs: list[str]) -> dict[str, str]:
    switches = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise Dsv4Error(f"--switch {pair!r}: write NAME=VALUE")
        if name in BY_NAME:
            value = BY_NAME[name].normalise(value) if BY_NAME[name].kind != "text" else value
        switches[name] = value
    return switches


def ingest_log(store: Store, log: Path, experiment: str, sacct: Path | None, switch_pairs: list[str],
               tags: list[str]) -> tuple[int, Verdict]:
    switches = parse_switches(switch_pairs)
    verdict = judge_files(log, sacct)
    # An ingested run has no spec: its experiment row records what is known, hashed like a spec.
    described = {"name": experiment, "ingested": True, "switches": dict(sorted(switches.items()))}
    text = json.dumps(described, sort_keys=True)
    experiment_id = store.experiment_id(experiment, hashlib.sha256(text.encode()).hexdigest()[:12], text,
                                        str(log))
    sched = verdict.scheduler or {}
    token = "ingest-" + hashlib.sha256(f"{log.resolve()}|{now()}|{os.getpid()}".encode()).hexdigest()[:12]
    run_id = store.add_run(experiment_id=experiment_id, backend="ingest", token=token,
        state=sched.get("state") or "INGESTED",
        job_id=sched.get("job_id"), exit_code=sched.get("exit_code"), signal=sched.get("signal"),
        elapsed_s=sched.get("elapsed_s"), max_rss_kib=sched.get("max_rss_kib"), node=sched.get("node_list"),
        run_dir=str(log.resolve().parent), log_path=str(log.resolve()), switches_json=json.dumps(switches),
        tags=",".join(tags), ingested=1, point_json="{}", repeat_index=0)
    store.save_verdict(run_id, verdict.to_json())
    return run_id, verdict
