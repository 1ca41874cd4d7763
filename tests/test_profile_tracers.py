"""Kernel tracers wrapped around the job (issue 23): `profile: {tool: rocprofv3 | hipprof}` renders the probe's line
inside the tracer, a missing tracer is a setup error that names it, and the tracer's files are found, listed in
the DSV4_PROFILE line and read by `dsv4ctl profile RUN`.

rocprofv3 and hipprof cannot be installed on this CPU machine: the run through the local backend uses a stand-in
(tests/fixtures/tracers/rocprofv3, which runs the job and writes a recorded kernel trace where rocprofv3 writes
its CSV). What is tested is dsv4ctl's side: the command line, the check, the marker, the reading."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.campaign.plan import submit
from dsv4ctl.campaign.watch import watch
from dsv4ctl.profile.breakdown import read_breakdown
from dsv4ctl.spec.load import load_spec
from dsv4ctl.spec.render import render_script
from dsv4ctl.store import open_store

from .conftest import FIXTURES, ROOT

TRACERS = FIXTURES / "tracers"
RECORDED = FIXTURES / "profiles" / "rocprofv3_kernel_trace.csv"


def spec_yaml(d: Path, name: str, profile: str) -> Path:
    path = d / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nplatform: cpu\nmodel: {{path: /models/none}}\n"
        "requests:\n  - messages: [{role: user, content: hi}]\nsampling: {max_tokens: 32}\n"
        f"profile: {profile}\n"
        "environment:\n"
        f"  python: {sys.executable}\n  runtime_dir: {FIXTURES / 'runtime'}\n  pythonpath: [{ROOT / 'runtime'}]\n"
        f"  env: {{REPLAY_LOG: {FIXTURES / 'logs' / 'J17.log'}}}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("tool, line", [
    ("rocprofv3", "rocprofv3 --kernel-trace --memory-copy-trace --output-format csv --output-directory profile -- "),
    ("hipprof", "hipprof --hip-trace -d profile -o profile/hipprof_results.csv "),
])
def test_a_kernel_tracer_wraps_the_probe_and_the_script_passes_shellcheck(tmp_path, tool, line):
    script = render_script(load_spec(spec_yaml(tmp_path, "t", f"{{tool: {tool}}}"))[0].spec, str(ROOT / "runtime"))
    probe = next(l for l in script.splitlines() if "dsv4_probe.py" in l and not l.startswith("#"))
    assert probe.startswith(line), probe
    assert f"command -v {tool} " in script and "-m dsv4rt.profiling spec.json \"$status\"" in script
    (tmp_path / "job.sh").write_text(script, encoding="utf-8")
    result = subprocess.run([shutil.which("shellcheck") or "shellcheck", "-s", "bash", str(tmp_path / "job.sh")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    torch = render_script(load_spec(spec_yaml(tmp_path, "u", "{steps: 4}"))[0].spec, str(ROOT / "runtime"))
    assert "command -v" not in torch and "dsv4rt.profiling" not in torch  # torch's profiler: the probe's own


def test_a_window_asked_of_a_kernel_tracer_is_refused_in_one_line(tmp_path, cli):
    r = cli("validate", spec_yaml(tmp_path, "w", "{tool: hipprof, steps: 4}"))
    assert r.exit_code != 0
    assert "steps: torch's profiler only; hipprof traces the whole run" in r.output
    assert "Traceback" not in r.output and "pydantic" not in r.output


def run_local(tmp_path: Path, monkeypatch, path_dirs: list[Path]):
    monkeypatch.setenv("PATH", ":".join([*(str(p) for p in path_dirs), "/usr/bin", "/bin"]))
    store = open_store(tmp_path / "r.db")
    outcome = submit(store, [spec_yaml(tmp_path, "traced", "{tool: rocprofv3}")], "local", runs_root=tmp_path / "runs")
    watch(store, interval_s=1, max_interval_s=2, timeout_s=120)
    run = store.find_run(str(outcome.run_ids[0]))
    return store, run


def test_a_missing_tracer_is_a_setup_error_that_names_it(tmp_path, monkeypatch):
    store, run = run_local(tmp_path, monkeypatch, [])
    v = store.verdict(run.id)
    assert not v["passed"] and v["first_blocker"]["kind"] == "setup_error", v["first_blocker"]
    assert "rocprofv3 is not on PATH (profile.tool: rocprofv3)" in v["first_blocker"]["message"]
    assert "DSV4_PROFILE" not in Path(run.log_path).read_text()  # the engine never started


def test_the_tracer_s_files_are_listed_and_read_by_profile(tmp_path, monkeypatch, cli):
    store, run = run_local(tmp_path, monkeypatch, [TRACERS])
    v = store.verdict(run.id)
    assert v["passed"], v.get("reasons")  # the wrapped job is judged as any other
    line = next(l for l in Path(run.log_path).read_text().splitlines() if l.startswith("DSV4_PROFILE: "))
    marker = json.loads(line[len("DSV4_PROFILE: "):])
    assert marker["tool"] == "rocprofv3" and marker["window"] == "run" and marker["exit"] == 0
    names = sorted(f["file"] for f in marker["files"])
    assert len(names) == 2 and names[0].endswith("_kernel_trace.csv") and names[1].endswith("_memory_copy_trace.csv")
    assert Path(marker["dir"]) == Path(run.log_path).parent / "profile"
    r = cli("profile", str(run.id), "--db", str(tmp_path / "r.db"), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):])
    assert data["window"] == "run" and data["device"] == "gpu"
    copies = 6.5 + 1.25 + 0.8  # the three rows of recorded_memory_copy_trace.csv, in us
    kernels_only = read_breakdown(RECORDED)  # the recorded kernel trace alone (its own copy kernels included)
    assert data["kernel_us"] == pytest.approx(kernels_only.kernel_us + copies)
    memcpy = next(c for c in data["categories"] if c["name"] == "memcpy")
    # one process's kernels and copies are one profile: the copies land in memcpy beside the copy kernels
    assert memcpy["kernel_us"] == pytest.approx(kernels_only.categories["memcpy"] + copies)


def test_a_broken_memory_copy_companion_is_one_clear_error(tmp_path):
    """A kernel trace's companion that is not a memory copy trace (cut, another CSV) is refused in one line, naming
    the file, rather than read as kernels or skipped silently (a profile would lose its copies)."""
    from dsv4ctl.profile.reader import TraceError

    kernels = tmp_path / "77_kernel_trace.csv"
    kernels.write_text(RECORDED.read_text())
    (tmp_path / "77_memory_copy_trace.csv").write_text('"Kind","Stream_Id"\n"MEMORY_COPY",0\n')
    with pytest.raises(TraceError, match=r"77_memory_copy_trace\.csv: not a rocprofv3 memory copy trace"):
        read_breakdown(kernels)
    (tmp_path / "77_memory_copy_trace.csv").write_text(
        '"Kind","Direction","Start_Timestamp","End_Timestamp"\n"MEMORY_COPY","MEMORY_COPY_HOST_TO_DEVICE",90,40\n')
    with pytest.raises(TraceError, match="ends before it starts"):
        read_breakdown(kernels)
