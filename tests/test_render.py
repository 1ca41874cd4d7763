"""Rendering: the saved J17 reference, shellcheck, exit-code propagation, and quoting that no value escapes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl.spec.render import render_script, write_run_files
from dsv4ctl.spec.models import ExperimentSpec
from dsv4ctl.spec.load import load_spec

from .conftest import EXPERIMENTS, FIXTURES

REFERENCE = FIXTURES / "render" / "j17-baseline.sh"
RUNTIME = "/opt/dsv4ctl/runtime"
REGENERATE = (f"dsv4ctl render experiments/j17-baseline.yaml --runtime-dir {RUNTIME} "
              "-o tests/fixtures/render/j17-baseline.sh")


def j17() -> ExperimentSpec:
    return load_spec(EXPERIMENTS / "j17-baseline.yaml")[0].spec


def test_j17_script_matches_the_saved_reference():
    rendered = render_script(j17(), RUNTIME)
    assert rendered == REFERENCE.read_text(encoding="utf-8"), (
        f"the rendered J17 script changed; if that is intended, regenerate the reference with:\n  {REGENERATE}")


def test_j17_script_carries_the_reports_resources_and_exit_code_handling():
    text = render_script(j17(), RUNTIME)
    for line in ("#SBATCH --gres=dcu:8", "#SBATCH --cpus-per-task=64", "#SBATCH --mem=240gb",
                 "#SBATCH --time=02:00:00", "module load compiler/dtk/26.04", "export VLLM_ROCM_USE_SKINNY_GEMM=0",
                 f"export PYTHONPATH={RUNTIME}", 'finish "$?"', f"#SBATCH --comment=dsv4ctl:{j17().spec_hash()}"):
        assert line in text, line


def test_same_spec_renders_byte_identical():
    assert render_script(j17(), RUNTIME) == render_script(j17(), RUNTIME)
    assert render_script(j17(), RUNTIME) != render_script(load_spec(EXPERIMENTS / "tp4.yaml")[0].spec, RUNTIME)


def rendered_examples(tmp_path: Path) -> list[Path]:
    scripts = []
    for spec_file in sorted(EXPERIMENTS.glob("**/*.yaml")):
        for i, point in enumerate(load_spec(spec_file)):
            assert point.spec is not None, f"{spec_file} point {i} is invalid"
            path = tmp_path / f"{spec_file.stem}-{i}.sh"
            path.write_text(render_script(point.spec, RUNTIME), encoding="utf-8")
            scripts.append(path)
    return scripts


def test_every_example_renders_to_valid_bash(tmp_path):
    for script in rendered_examples(tmp_path):
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script.name}: {result.stderr}"


def test_every_example_passes_shellcheck(tmp_path):
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: the README test command installs it (apt-get install shellcheck)"
    for script in rendered_examples(tmp_path):
        result = subprocess.run([shellcheck, "-s", "bash", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script.name}:\n{result.stdout}"


# ---- running rendered scripts for real -----------------------------------------------------------------------

DUMPER = """\
import json, os, sys
keep = {k: v for k, v in os.environ.items() if k.startswith(("DSV4_", "VLLM_", "PROP_")) or k in ("PYTHONPATH", "LD_LIBRARY_PATH")}
with open("dump.json", "w", encoding="utf-8", errors="surrogateescape") as f:
    json.dump({"argv": sys.argv, "env": keep}, f)
sys.exit(int(os.environ.get("PROP_EXIT", "0")))
"""


def run_script(run_dir: Path, spec: ExperimentSpec, runtime: str, extra_env: dict[str, str] | None = None):
    script = write_run_files(spec, run_dir, runtime)
    env = {"PATH": os.environ["PATH"], "HOME": str(run_dir), **(extra_env or {})}
    # `module` stands in for Lmod: it records each call as its argument count, then its arguments, all
    # NUL-terminated (NUL is the one byte an argument cannot hold, so any module name parses back unambiguously).
    module = "module() { printf '%s\\0' \"$#\" \"$@\" >> modules.log; }; export -f module; "
    return subprocess.run(["bash", "-c", module + f'bash {json.dumps(str(script))}'], cwd=run_dir, env=env,
                          capture_output=True, timeout=60)


def spec_with(tmp_path: Path, **environment) -> ExperimentSpec:
    dumper = tmp_path / "fake_python.py"
    dumper.write_text(DUMPER, encoding="utf-8")
    base = j17().model_dump()
    base["environment"] = {"python": sys.executable, "pythonpath": [], "ld_library_path": [], "modules": [],
                           "env": {}, **environment}
    base["environment"]["pythonpath"] = [str(tmp_path)] + list(base["environment"]["pythonpath"])
    return ExperimentSpec.model_validate(base)


def test_job_exit_code_is_pythons_and_the_log_ends_with_py_exit(tmp_path):
    spec = spec_with(tmp_path)
    runtime = tmp_path / "rt"
    runtime.mkdir()
    shutil.copy(tmp_path / "fake_python.py", runtime / "dsv4_probe.py")
    for code in (0, 3):
        run_dir = tmp_path / f"run{code}"
        result = run_script(run_dir, spec, str(runtime), {"PROP_EXIT": str(code)})
        assert result.returncode == code
        log = (run_dir / "raw.log").read_text().splitlines()
        assert log[0] == "### STAGE: job" and log[-1] == f"PY_EXIT={code}"
        assert result.stdout.decode().strip() == f"PY_EXIT={code}"


def test_python_killed_by_a_signal_is_not_completed(tmp_path):
    runtime = tmp_path / "rt"
    runtime.mkdir()
    (runtime / "dsv4_probe.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = run_script(tmp_path / "run", spec_with(tmp_path), str(runtime))
    assert result.returncode == 137
    assert (tmp_path / "run" / "raw.log").read_text().splitlines()[-1] == "PY_EXIT=137"


def test_failed_setup_step_ends_the_log_with_py_exit(tmp_path):
    spec = spec_with(tmp_path, venv=str(tmp_path / "no-such-venv"))
    result = run_script(tmp_path / "run", spec, str(tmp_path))
    log = (tmp_path / "run" / "raw.log").read_text()
    assert result.returncode == 127
    assert "DSV4_SETUP_ERROR: activate" in log and log.splitlines()[-1] == "PY_EXIT=127"


# Anything a YAML string can hold, except NUL (no environment variable can carry it).
shell_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)
path_part = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1,
                    max_size=16).filter(lambda s: s not in (".", ".."))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def module_calls(log: Path) -> list[list[str]]:
    fields = log.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
    calls, i = [], 0
    while i < len(fields):
        n = int(fields[i])
        calls.append(fields[i + 1:i + 1 + n])
        i += n + 1
    return calls


@given(value=shell_text, module=shell_text.filter(bool), venv_name=path_part, entry=shell_text, lib=shell_text,
       runtime_name=path_part)
def test_spec_values_reach_the_job_byte_identical_and_never_execute(tmp_path_factory, value, module, venv_name,
                                                                     entry, lib, runtime_name):
    tmp_path = tmp_path_factory.mktemp("prop")
    venv = tmp_path / venv_name
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("export PROP_ACTIVATED=1\n")
    runtime = tmp_path / runtime_name
    runtime.mkdir(exist_ok=True)
    shutil.copy(Path(__file__).parent / "fixtures" / "fake_probe.py", runtime / "dsv4_probe.py")
    spec = spec_with(tmp_path, env={"PROP_VALUE": value}, modules=[module], venv=str(venv),
                     pythonpath=[entry], ld_library_path=[lib])
    result = run_script(tmp_path / "run", spec, str(runtime))
    assert result.returncode == 0, (tmp_path / "run" / "raw.log").read_bytes()
    dump = json.loads((tmp_path / "run" / "dump.json").read_text(encoding="utf-8", errors="surrogateescape"))
    env = dump["env"]
    assert env["PROP_VALUE"] == value
    assert env["PROP_ACTIVATED"] == "1"
    assert env["PYTHONPATH"] == f"{runtime}:{tmp_path}:{entry}"
    assert env.get("LD_LIBRARY_PATH", "") == lib
    assert dump["argv"] == [str(runtime / "dsv4_probe.py"), "spec.json"]
    assert module_calls(tmp_path / "run" / "modules.log")[:2] == [["purge"], ["load", module]]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["dump.json", "job.sh", "modules.log",
                                                                     "raw.log", "spec.json"]


@settings(max_examples=30, deadline=None)
@given(prompt=st.text(st.characters(blacklist_categories=("Cs",)), max_size=64))
def test_prompts_travel_in_the_snapshot_not_the_script(prompt):
    base = j17().model_dump()
    base["requests"] = [{"messages": [{"role": "user", "content": prompt}]}]
    spec = ExperimentSpec.model_validate(base)
    from dsv4ctl.spec.render import snapshot_text

    assert json.loads(snapshot_text(spec))["requests"][0]["messages"][0]["content"] == prompt
    script = render_script(spec, RUNTIME)
    assert script.replace(spec.spec_hash(), "") == render_script(j17(), RUNTIME).replace(j17().spec_hash(), "")


@pytest.mark.parametrize("field, value", [("slurm.partition", "dcu\n#SBATCH --wrap=x"),
                                          ("slurm.account", "a b"), ("slurm.extra", {"qos": "x y"}),
                                          ("slurm.extra", {"wrap;": "x"}), ("environment.env", {"A-B": "1"})])
def test_values_that_would_break_sbatch_lines_are_refused(field, value):
    from pydantic import ValidationError

    base = j17().model_dump()
    section, key = field.split(".")
    base[section][key] = value
    with pytest.raises(ValidationError):
        ExperimentSpec.model_validate(base)
