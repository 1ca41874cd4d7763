"""Import the raw log of an earlier run (the report's jobs, runs made by hand) into the store."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

from .errors import Dsv4Error
from .judge.files import judge_files
from .store import Store
from .switches import BY_NAME
from .versions import read_versions
from .judge.rules import Verdict


def _label_like(job_id: str) -> bool:
    import re

    from .spec import LABEL_PATTERN, RESERVED_LABELS

    return re.fullmatch(LABEL_PATTERN, job_id) is not None and job_id not in RESERVED_LABELS  # a bare number would read as a run id


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
               tags: list[str], label: str | None = None, git_sha: str | None = None) -> tuple[int, Verdict]:
    """Judge a log (and its sacct text) and record it as a run. Its label is `label`, else the job id the
    scheduler record names (J08), made unique (J08-2) when another run has it already."""
    switches = parse_switches(switch_pairs)
    verdict = judge_files(log, sacct)
    # An ingested run has no spec: its experiment row records what is known, hashed like a spec.
    described = {"name": experiment, "ingested": True, "switches": dict(sorted(switches.items()))}
    text = json.dumps(described, sort_keys=True)
    experiment_id = store.experiment_id(experiment, hashlib.sha256(text.encode()).hexdigest()[:12], text,
                                        str(log))
    sched = verdict.scheduler or {}
    token = f"ingest-{secrets.token_hex(6)}"  # the same log ingested twice in one second is two runs
    if label is None and sched.get("job_id") and _label_like(sched["job_id"]):
        label = store.free_label(sched["job_id"])
    run_id = store.add_run(experiment_id=experiment_id, backend="ingest", token=token, label=label,
        state=sched.get("state") or "INGESTED",
        job_id=sched.get("job_id"), exit_code=sched.get("exit_code"), signal=sched.get("signal"),
        elapsed_s=sched.get("elapsed_s"), max_rss_kib=sched.get("max_rss_kib"), node=sched.get("node_list"),
        run_dir=str(log.resolve().parent), log_path=str(log.resolve()), switches_json=json.dumps(switches),
        tags=",".join(tags), ingested=1, point_json="{}", repeat_index=0, git_sha=git_sha)
    store.save_verdict(run_id, verdict.to_json(), read_versions(log))
    return run_id, verdict
