"""The local backend's job wrapper: `python -m dsv4ctl.localrun RUN_DIR SCRIPT`.

Runs the rendered script with bash in its own process group, in its own session (it outlives the CLI), and keeps
`local-state.json` in the run directory the way Slurm keeps its accounting: state, exit code and signal, start, end,
elapsed seconds, peak RSS. Enforces `slurm.time` from spec.json (TIMEOUT); SIGTERM cancels (CANCELLED). Stdlib only.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

STATE_FILE = "local-state.json"
KILL_WAIT_S = 5


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def write_state(run_dir: Path, **state: object) -> None:
    tmp = run_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, sort_keys=True))
    os.replace(tmp, run_dir / STATE_FILE)  # readers never see half a file


def read_state(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def time_limit_s(run_dir: Path) -> float | None:
    """`slurm.time` of the spec snapshot in seconds (Slurm forms: M, M:S, H:M:S, D-H[:M[:S]])."""
    try:
        text = json.loads((run_dir / "spec.json").read_text())["slurm"]["time"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not text:
        return None
    days, _, rest = str(text).rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        seconds = int(days) * 86400 + sum(v * m for v, m in zip(parts, (3600, 60, 1)))
    elif len(parts) == 1:
        seconds = parts[0] * 60  # Slurm reads a bare number as minutes
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(seconds)


def _stop(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(run_dir: Path, script: str) -> int:
    start = time.time()
    limit = time_limit_s(run_dir)
    base = {"wrapper_pid": os.getpid(), "node": socket.gethostname(), "started_at": _stamp(start)}
    with open(run_dir / "slurm-local.out", "ab") as out:
        child = subprocess.Popen(["bash", script], cwd=run_dir, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    write_state(run_dir, state="RUNNING", job_pgid=child.pid, **base)
    stopped_by: list[str] = []

    def on_term(signum: int, frame: object) -> None:
        stopped_by.append("CANCELLED")
        _stop(child.pid)

    signal.signal(signal.SIGTERM, on_term)
    try:
        rc = child.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        stopped_by.append("TIMEOUT")
        _stop(child.pid)
        rc = child.wait()
    end = time.time()
    exit_code, sig = (0, -rc) if rc < 0 else (rc, 0)
    if stopped_by:
        state = stopped_by[0]
        exit_code, sig = 0, signal.SIGTERM  # as Slurm reports a killed job: 0:15
    else:
        state = "COMPLETED" if rc == 0 else "FAILED"
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    write_state(run_dir, state=state, job_pgid=child.pid, exit_code=exit_code, signal=int(sig),
                ended_at=_stamp(end), elapsed_s=int(round(end - start)), max_rss_kib=peak_kib, **base)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve(), sys.argv[2]))
