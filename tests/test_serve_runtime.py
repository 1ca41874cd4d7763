"""The serve job's defences (issue 29 S6, S8, S9), on real processes and sockets without the engine: server.log
capped with the cap said in it, the port checked before the server starts and readiness counted only from the
job's own server, records appended as requests end, and in-flight requests capped below the open-file limit."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "runtime"))

from dsv4rt import serve, server as serverlib  # noqa: E402
from dsv4rt.serverlog import TAIL_KEPT, ServerLog  # noqa: E402


def test_server_log_keeps_its_head_says_its_cap_and_ends_with_the_last_lines(tmp_path):
    # S9: 19,607 EngineDeadError tracebacks made a 1.1 GB server.log in two minutes
    path = tmp_path / "server.log"
    log = ServerLog(path, cap_bytes=64 * 1024)
    writer = subprocess.Popen([sys.executable, "-c", "import sys\nfor i in range(50000): print(f'line {i} ' + 'x' * 40)"],
                              stdout=log.write_fd, stderr=subprocess.STDOUT)
    log.started()
    writer.wait()
    log.close()
    text = path.read_text()
    lines = text.splitlines()
    assert len(text) < 64 * 1024 + TAIL_KEPT * 60 + 1024  # head + the kept tail + two lines of ours
    assert lines[0].startswith("line 0 ")
    cap = next(i for i, line in enumerate(lines) if line.startswith("### dsv4: server.log reached its cap of 64.0 KiB"))
    end = next(i for i, line in enumerate(lines) if line.startswith("### dsv4: server.log capped at 64.0 KiB: "))
    assert lines[cap - 1].startswith(f"line {cap - 1} ")  # nothing dropped before the cap
    dropped = 50000 - cap
    assert f": {dropped} line(s)" in lines[end] and f"the last {TAIL_KEPT} of them follow" in lines[end]
    assert lines[end + 1].startswith(f"line {50000 - TAIL_KEPT} ") and lines[-1].startswith("line 49999 ")
    assert log.tail(2)[-1].startswith("line 49999 ")


def test_the_jobs_stop_is_marked_between_the_servers_lines(tmp_path):
    proc = serverlib.ServerProcess([sys.executable, "-c", "import time\nprint('serving', flush=True)\ntime.sleep(60)"],
                                   tmp_path / "server.log")
    deadline = time.monotonic() + 10
    while "serving" not in (tmp_path / "server.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    said = proc.stop(5)
    proc.close()
    assert said.startswith("stopped by SIGINT")
    lines = (tmp_path / "server.log").read_text().splitlines()
    assert lines[0] == "serving"
    assert lines[1].startswith("### dsv4: the job stops the server (pid ") and "up and serving" in lines[1]


def test_a_port_in_use_is_refused_before_the_server_starts():
    # S6: a foreign listener on serve.port was taken for the job's server
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(serverlib.ServerFailed, match=rf"serve.port {port} is in use by another process "
                                                         rf"\(pid {os.getpid()}\)"):
            serverlib.check_port_free(port)
    serverlib.check_port_free(port)  # free again: no error


def test_readiness_counts_only_the_jobs_own_server(tmp_path):
    # S6: another process answers GET /health on the port; the job's own "server" never listens
    (tmp_path / "health").write_text("ok")
    port = serverlib.free_port()
    foreign = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not serverlib.port_holders(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        ours = serverlib.ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "server.log")
        try:
            with pytest.raises(serverlib.ServerFailed, match=rf"answered by process {foreign.pid}, not by the vLLM "
                                                             rf"server \(pid {ours.pid}\)"):
                ours.wait_ready(f"http://127.0.0.1:{port}", 20)
        finally:
            ours.stop(2)
            ours.close()
    finally:
        foreign.terminate()
        foreign.wait()


def test_records_are_on_disk_as_each_request_ends(tmp_path):
    # S8: the file used to be written once the load was over: a job killed at its time limit kept nothing
    path = tmp_path / "serve-requests.jsonl"
    records = serve.RecordLog(path)
    records({"index": 3, "warmup": False})
    assert [json.loads(line)["index"] for line in path.read_text().splitlines()] == [3]  # flushed, still open
    records({"index": 1, "warmup": False})
    records.close()
    assert len(path.read_text().splitlines()) == 2
    serve.write_jsonl(path, [{"index": 1}, {"index": 3}])  # the end of the load: the whole file, in index order
    assert [json.loads(line)["index"] for line in path.read_text().splitlines()] == [1, 3]


CAP = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (400, 600))
from dsv4rt.serve import connection_cap
loads = [({"max_concurrency": None, "duration_s": None}, 20000), ({"max_concurrency": None, "duration_s": None}, 64),
         ({"max_concurrency": 5000, "duration_s": None}, 20000), ({"max_concurrency": None, "duration_s": 60}, 8)]
print(json.dumps([connection_cap(load, n) for load, n in loads] + [resource.getrlimit(resource.RLIMIT_NOFILE)[0]]))
"""


def test_requests_in_flight_are_capped_below_the_open_file_limit():
    # S9: 20,000 streams at once and no max_concurrency ran the client and the server out of descriptors
    done = subprocess.run([sys.executable, "-c", CAP, str(ROOT / "runtime")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    flood, small, big_cap, soak, soft = json.loads(done.stdout)
    assert soft == 600  # raised to the hard limit first
    assert flood == [344, "no max_concurrency: at most 344 requests in flight, below the open-file limit 600 "
                          "(RLIMIT_NOFILE, less 256 for the job and the server)"]
    assert small == [None, None]
    assert big_cap[0] == 344 and big_cap[1].startswith("max_concurrency 5000: at most 344")
    assert soak[0] == 344  # a soak can pile up without end


# ---- the real engine: a job killed at its time limit, a server killed from outside --------------------------------

from .test_engine import engine  # noqa: E402,F401 - the fixture that skips without the CPU engine
from .test_serve_job import serve_variant  # noqa: E402


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def stage_and_server(raw) -> int | None:
    text = raw.read_text() if raw.exists() else ""
    found = re.search(r"^server pid (\d+):", text, re.M)
    return int(found.group(1)) if found and "### STAGE: load" in text else None


@pytest.mark.engine
def test_a_killed_serve_job_keeps_its_records_and_leaves_no_process(engine, tmp_path):
    # S8: killed by its time limit mid-load, the job keeps every record it had; S7: the API server SIGKILLed from
    # outside leaves its EngineCore to init, and the local backend ends it with the job
    from dsv4ctl.campaign.plan import submit
    from dsv4ctl.scheduler.localprocs import job_processes
    from dsv4ctl.store import open_store
    from dsv4ctl.campaign.watch import watch
    from dsv4rt.server import process_tree

    killed = serve_variant(tmp_path, "serve-timeout", "load:\n  num_prompts: 800\n  request_rate: 4\n"
                           "  max_concurrency: 4\n  warmup_requests: 0\nslurm:\n  time: \"0:100\"\n")
    orphan = serve_variant(tmp_path, "serve-orphan", "load:\n  num_prompts: 400\n  request_rate: 4\n"
                           "  warmup_requests: 0\n")
    store = open_store(tmp_path / "r.db")
    outcome = submit(store, [killed, orphan], "local", runs_root=tmp_path / "runs")
    runs = [store.find_run(str(i)) for i in outcome.run_ids]
    raw = Path(runs[1].run_dir) / "raw.log"
    server_pid = wait_for(lambda: stage_and_server(raw), 500, "the second job's load")
    engine_pids = wait_for(lambda: process_tree(server_pid), 30, "the server's EngineCore")
    os.kill(server_pid, 9)
    watch(store, interval_s=1, timeout_s=300)

    timed_out, crashed = (store.find_run(str(r.id)) for r in runs)
    assert timed_out.state == "TIMEOUT"
    v = store.verdict(timed_out.id)
    lines = (Path(timed_out.run_dir) / "serve-requests.jsonl").read_text().splitlines()
    completed = sum(1 for line in lines if json.loads(line)["error"] is None)
    assert completed >= 1 and v["metrics"]["completed"] == completed, (len(lines), v["metrics"].get("completed"))
    assert v["status"] == "incomplete" and not v["passed"]
    assert any(r.endswith(f"of 800 requests have no record") for r in v["reasons"]), v["reasons"]

    v = store.verdict(crashed.id)
    assert v["status"] == "crashed" and "killed by signal SIGKILL during the load" in v["first_blocker"]["message"]
    for run in (timed_out, crashed):
        state = json.loads((Path(run.run_dir) / "local-state.json").read_text())
        assert job_processes(state["job_marker"]) == [], run.experiment
    assert not [pid for pid in engine_pids if serverlib.start_time(pid) is not None], "the orphaned EngineCore lives"
