"""The first hour, second batch (issue 26): spec messages in plain words with a did-you-mean, compare's length
differences and sides, the JSON error's findings, sweeps without a matrix, references said and shown, the units of
`show`, a run cancelled before it started, and the live wait's first blocker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from dsv4ctl.spec.load import load_spec

from .conftest import BASE_SPEC, FIXTURES
from .test_slurm import cluster  # noqa: F401 - the live cluster fixture


def dsv4(*args, cwd=None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it (cli.main: one-line errors, exit codes, --json error objects)."""
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


def only(points):
    [point] = points
    return point


def errors_of(write_spec, text: str) -> dict[str, str]:
    return {f.path: f.message for f in only(load_spec(write_spec(text))).errors}


# ---- m2: did you mean, and the spec reference where it is ------------------------------------------------------


def test_unknown_key_suggests_the_closest_field(write_spec):
    found = errors_of(write_spec, BASE_SPEC.replace("  max_tokens: 32", "  max_token: 32"))
    message = found["sampling.max_token"]
    assert message.startswith("unknown key") and "did you mean 'max_tokens'?" in message
    assert "docs/reference/spec.md" in message and "README" not in message


def test_unknown_key_with_nothing_close_lists_the_section_s_keys(write_spec):
    found = errors_of(write_spec, BASE_SPEC.replace("  gres:", "  zzzqqq: 1\n  gres:"))
    message = found["slurm.zzzqqq"]
    assert "did you mean" not in message and "slurm takes partition, account, gres" in message


def test_unknown_key_in_a_list_item_and_at_the_top(write_spec):
    text = BASE_SPEC.replace("  - messages: [{role: user, content: hi}]",
                             "  - messages: [{role: user, contnet: hi}]") + "repeat: 2\n"
    found = errors_of(write_spec, text)
    assert "did you mean 'content'?" in found["requests.0.messages.0.contnet"]
    assert "did you mean 'repeats'?" in found["repeat"]


# ---- m4: no pydantic text ------------------------------------------------------------------------------------------

PYDANTIC_WORDS = re.compile(r"should match pattern|List should|Input should|after validation|Field required|\^\(")


@pytest.mark.parametrize("change, path, said", [
    (("  gres:", '  time: "2 hours"\n  gres:'), "slurm.time",
     "'2 hours' is not a Slurm time; write HH:MM:SS or D-HH:MM:SS"),
    (("name: t", "name: has space"), "name", "'has space' is not a valid name"),
    (("requests:\n  - messages: [{role: user, content: hi}]", "requests: []"), "requests",
     "an empty list; give at least one item"),
    (("  gres: \"dcu:8\"", "  gres: \"eight\""), "slurm.gres", "is not a Slurm GRES"),
    (("  gres:", "  mem: lots\n  gres:"), "slurm.mem", "is not a Slurm memory size"),
    (("model:\n  path: /models/m", "model: {}"), "model.path", "required"),
    (("  max_tokens: 32", "  max_tokens: 32\n  top_p: fast"), "sampling.top_p", "expected a number"),
])
def test_structural_errors_are_plain_sentences(write_spec, change, path, said):
    found = errors_of(write_spec, BASE_SPEC.replace(*change))
    assert said in found[path], found
    assert not any(PYDANTIC_WORDS.search(m) for m in found.values()), found


def test_validate_prints_the_plain_sentence(write_spec, cli):
    path = write_spec(BASE_SPEC.replace("  gres:", '  time: "2 hours"\n  gres:'))
    result = cli("validate", path)
    assert result.exit_code == 1
    assert "slurm.time: '2 hours' is not a Slurm time" in result.output and "pattern" not in result.output


# ---- m15: the JSON error of an invalid spec carries its findings --------------------------------------------------


def test_submit_json_error_carries_the_findings(write_spec, tmp_path):
    path = write_spec(BASE_SPEC.replace("  max_tokens: 32", "  max_token: 32"))
    done = dsv4("submit", path, "--backend", "local", "--json", "--db", tmp_path / "r.db")
    assert done.returncode == 1 and done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["message"] == "1 error(s) in the spec" and error["exit_code"] == 1
    [finding] = error["findings"]
    assert finding["path"] == "sampling.max_token" and finding["severity"] == "error"
    assert finding["file"] == str(path) and finding["line"] == 10 and finding["column"] == 3
    assert "did you mean 'max_tokens'?" in finding["message"]


def test_json_error_of_another_failure_has_no_findings_key(tmp_path):
    done = dsv4("show", "J999", "--json", "--db", tmp_path / "r.db")
    assert done.returncode != 0 and "findings" not in json.loads(done.stderr)["error"]


# ---- m20: a sweep needs a matrix --------------------------------------------------------------------------------


def test_sweep_of_a_spec_with_no_matrix_is_refused_and_submits_nothing(write_spec, tmp_path):
    from dsv4ctl.commands.campaign_cmds import _require_matrix
    from dsv4ctl.store import Store

    path = write_spec(BASE_SPEC, "plain.yaml")
    db = tmp_path / "r.db"
    result = dsv4("sweep", path, "--backend", "local", "--no-wait", "--db", db)
    assert result.returncode == 2
    assert f"{path} has no matrix: use submit --repeats" in result.stderr
    store = Store(db)
    assert store.runs() == [] and store.campaigns() == []
    _require_matrix(write_spec(BASE_SPEC + "matrix:\n  sampling.max_tokens: [16, 32]\n", "mx.yaml"))  # no error


# ---- m24: show says what max_concurrent_requests counts -----------------------------------------------------------


def test_show_of_a_serve_run_says_max_concurrent_requests_is_vllm_s_one_second_bucket_count(tmp_path):
    from .serving_runs import load_records, write_run

    raw = write_run(tmp_path / "serve-run", load_records())
    db = tmp_path / "r.db"
    ingest = dsv4("ingest", "--log", raw, "--experiment", "cpu-serve", "--db", db)
    assert ingest.returncode == 0, ingest.stderr
    shown = dsv4("show", "latest", "--db", db)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    [serving] = [line for line in lines if line.startswith("serving: ")]
    assert "max_concurrent_requests=" in serving and "duration=" in serving and " s" in serving
    note = lines[lines.index(serving) + 1]
    assert "max_concurrent_requests: vLLM's peak over one-second buckets" in note
    assert "can exceed load.max_concurrency" in note


# ---- m26: a run cancelled before it started has no line 0 ---------------------------------------------------------


def test_offline_verdict_of_a_job_cancelled_before_start(tmp_path):
    (tmp_path / "empty.log").write_text("", encoding="utf-8")
    (tmp_path / "c.sacct").write_text("JobID|State|ExitCode|Elapsed|MaxRSS\n900|CANCELLED by 0|0:0|00:00:00|\n",
                                      encoding="utf-8")
    (tmp_path / "t.sacct").write_text("JobID|State|ExitCode|Elapsed|MaxRSS\n901|TIMEOUT|0:0|00:10:00|\n",
                                      encoding="utf-8")
    cancelled = dsv4("verdict", "--log", tmp_path / "empty.log", "--sacct", tmp_path / "c.sacct")
    assert "First blocker: cancelled before start (scheduler)" in cancelled.stdout, cancelled.stdout
    assert "line 0" not in cancelled.stdout
    timed_out = dsv4("verdict", "--log", tmp_path / "empty.log", "--sacct", tmp_path / "t.sacct")
    assert "First blocker: timeout after 00:10:00, before the job wrote a line (scheduler)" in timed_out.stdout
    assert "line 0" not in timed_out.stdout


@pytest.mark.slurm
def test_verdict_of_a_slurm_run_cancelled_while_pending(cluster, tmp_path):  # noqa: F811
    """A job held back by --begin, cancelled before it ever ran, judged by the watcher, then `verdict RUN`."""
    from dsv4ctl import external
    from dsv4ctl.campaign.plan import submit
    from dsv4ctl.store import open_store
    from dsv4ctl.campaign.watch import poll_once

    from .test_slurm import spec_file

    spec = spec_file(tmp_path, "never-started", {"REPLAY_LOG": str(FIXTURES / "logs" / "J17.log")},
                     slurm='gres: "dcu:1", extra: {begin: "now+3600"}')
    db = tmp_path / "r.db"
    store = open_store(db)
    run_id = submit(store, [spec], "slurm", runs_root=tmp_path / "runs").run_ids[0]
    job = store.find_run(str(run_id)).job_id
    try:
        assert dsv4("cancel", str(run_id), "--db", db).returncode == 0
        for _ in range(60):
            poll_once(store, [run_id])
            if store.verdict_summaries([run_id]).get(run_id):
                break
            time.sleep(1)
        shown = dsv4("verdict", str(run_id), "--db", db)
        assert shown.returncode == 1, shown.stderr
        assert "First blocker: cancelled before start (scheduler)" in shown.stdout, shown.stdout
        assert "line 0" not in shown.stdout
    finally:
        external.run(["scancel", job])


# ---- M5 (first half): the live wait table shows the first blocker's message ---------------------------------------


def in_a_terminal(args: list[str], columns: int = 80, timeout_s: float = 120) -> str:
    """Run the CLI on a pseudo-terminal `columns` wide (rich draws its live table only on a terminal); every byte
    it wrote, escape sequences taken out."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on the terminal
        os.environ.update({"COLUMNS": str(columns), "LINES": "40", "TERM": "xterm"})
        os.environ.pop("DSV4CTL_WIDE", None)
        os.execv(sys.executable, [sys.executable, "-m", "dsv4ctl.cli", *map(str, args)])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    chunks, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    else:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    # each redraw erases lines (ESC[2K) and moves up: read an erase or a carriage return as a new line
    text = re.sub(r"\x1b\[2K|\r", "\n", text)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)


def test_the_live_wait_table_shows_the_first_blocker_s_message_at_80_columns(tmp_path):
    from .test_slurm import spec_file

    spec = spec_file(tmp_path, "broken", {"REPLAY_LOG": str(FIXTURES / "logs" / "J01.log"), "REPLAY_EXIT": "1"},
                     slurm='time: "0:5"')
    shown = in_a_terminal(["submit", spec, "--backend", "local", "--wait", "--db", tmp_path / "r.db",
                           "--runs-dir", tmp_path / "runs"])
    header = [line for line in shown.splitlines() if "first" in line and "verdict" in line]
    assert header, shown
    rows = [line for line in shown.splitlines() if re.search(r" crashed +line \d+: RuntimeError: \S", line)]
    assert rows, shown  # the message with its line, not the kind `exception`
    assert all(len(line) <= 80 for line in header + rows), [len(line) for line in header + rows]


def test_first_blocker_cell_and_its_elision():
    from dsv4ctl.report.output import elide_message, first_blocker_cell

    failed = {"passed": False, "first_blocker_kind": "exception", "first_blocker_line": 40,
              "first_blocker_message": "FileNotFoundError: /models/tiny-qwen3/config.json"}
    assert first_blocker_cell(failed) == "line 40: FileNotFoundError: /models/tiny-qwen3/config.json"
    assert first_blocker_cell({**failed, "first_blocker_message": None}) == "exception"
    assert first_blocker_cell({**failed, "passed": True}) == "" and first_blocker_cell(None) == ""
    assert elide_message(first_blocker_cell(failed), 40) == "line 40: FileNotFoundError: …config.json"
    assert elide_message("a run of 31 BOS tokens (id 0): x", 20) == "a run of 3…(id 0): x"
