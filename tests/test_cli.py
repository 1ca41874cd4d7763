"""The command line as a user meets it: exit codes, --json, messages that name the field and the line."""

from __future__ import annotations

import json
import subprocess
import sys

from dsv4ctl.paths import runtime_dir
from dsv4ctl.spec.render import render_script
from dsv4ctl.spec.load import load_spec

from .conftest import BASE_SPEC, EXPERIMENTS, FIXTURES


def test_validate_ok_and_json(cli):
    result = cli("validate", EXPERIMENTS / "j17-baseline.yaml", EXPERIMENTS / "tp4.yaml")
    assert result.exit_code == 0 and "j17-baseline.yaml: ok" in result.output
    data = json.loads(cli("validate", "--json", EXPERIMENTS / "q1-off.yaml").output)
    assert data[0]["name"] == "q1-off" and data[0]["valid"] and len(data[0]["spec_hash"]) == 12


def test_validate_names_field_line_and_job(cli, write_spec):
    path = write_spec(BASE_SPEC.replace("max_tokens: 32", "max_tokens: 1"))
    result = cli("validate", path)
    assert result.exit_code == 1
    assert f"{path}:10:3: error: sampling.max_tokens" in result.output and "J11" in result.output


def test_warnings_pass_unless_strict(cli, write_spec):
    path = write_spec(BASE_SPEC.replace("max_tokens: 32", "max_tokens: 8"))
    assert cli("validate", path).exit_code == 0
    assert cli("validate", "--strict", path).exit_code == 1


def test_yaml_error_is_one_line_with_position(write_spec):
    path = write_spec("name: x\nmodel: [unclosed\n")
    result = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "validate", str(path)], capture_output=True,
                            text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"error: {path}:" in result.stderr and "YAML syntax error" in result.stderr


def test_missing_file_is_a_usage_error(cli):
    assert cli("validate", "no-such.yaml").exit_code == 2


def test_render_prints_the_script(cli):
    result = cli("render", EXPERIMENTS / "j17-baseline.yaml")
    spec = load_spec(EXPERIMENTS / "j17-baseline.yaml")[0].spec
    assert result.exit_code == 0 and result.stdout == render_script(spec, str(runtime_dir()))


def test_render_run_dir_writes_script_and_snapshot(cli, tmp_path):
    result = cli("render", EXPERIMENTS / "j17-baseline.yaml", "--run-dir", tmp_path / "run")
    assert result.exit_code == 0
    snapshot = json.loads((tmp_path / "run" / "spec.json").read_text())
    assert snapshot["name"] == "j17-baseline" and (tmp_path / "run" / "job.sh").stat().st_mode & 0o100


def test_render_refuses_an_invalid_spec(write_spec):
    path = write_spec(BASE_SPEC.replace("tp: 8", "tp: 16"))
    result = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "render", str(path)], capture_output=True,
                            text=True)
    assert result.returncode == 1 and "parallel.tp" in result.stderr and result.stdout == ""


def test_render_asks_for_a_point_of_a_matrix(cli, write_spec):
    path = write_spec(BASE_SPEC + "matrix:\n  batch: [1, 8]\n")
    result = subprocess.run([sys.executable, "-m", "dsv4ctl.cli", "render", str(path)], capture_output=True,
                            text=True)
    assert result.returncode == 1 and "--point" in result.stderr
    assert "#SBATCH --job-name=t.batch=8" in cli("render", path, "--point", "1").stdout


def test_expand_json(cli, write_spec):
    path = write_spec(BASE_SPEC + "matrix:\n  batch: [1, 2, 4, 8]\n")
    points = json.loads(cli("expand", "--json", path).stdout)
    assert [p["point"]["batch"] for p in points] == [1, 2, 4, 8]


def test_switches_json_lists_the_registry(cli):
    data = json.loads(cli("switches", "--json").stdout)
    by_name = {s["name"]: s for s in data}
    assert by_name["DSV4_MOE_ROUTING_Q1"]["default"] == "1"
    assert by_name["DSV4_TP"]["derived_from"] == "parallel.tp"
    assert "Known switches" in cli("switches").stdout


def test_verdict_exit_codes_and_json(cli):
    logs = FIXTURES / "logs"
    ok = cli("verdict", "--log", logs / "J17.log", "--sacct", logs / "J17.sacct")
    assert ok.exit_code == 0 and "COHERENT" in ok.stdout and "PASSED" in ok.stdout
    bad = cli("verdict", "--log", logs / "J08.log", "--sacct", logs / "J08.sacct", "--json")
    data = json.loads(bad.stdout)
    assert bad.exit_code == 1 and data["false_green"] and data["status"] == "degenerate"
    assert cli("verdict").exit_code == 2


def test_verdict_human_output_shows_blocker_in_context(cli):
    result = cli("verdict", "--log", FIXTURES / "logs" / "J12.log")
    assert result.exit_code == 1
    assert "First blocker" in result.stdout and "only supports fp8 kv-cache" in result.stdout
    assert "ignored noise" in result.stdout


def test_cli_cold_path_imports_nothing_heavy():
    code = ("import sys, dsv4ctl.cli; heavy = ('torch', 'vllm', 'numpy', 'scipy', 'pandas', 'pydantic', 'jinja2',"
            " 'yaml', 'rich', 'sqlite_utils'); print(','.join(m for m in heavy if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_job_side_modules_need_only_the_standard_library():
    # The probe imports these in a venv that has vLLM but none of the CLI's dependencies.
    code = ("import sys; import dsv4ctl.judge.rules, dsv4ctl.judge.scan, dsv4ctl.judge.sacct, dsv4ctl.spec.switches; "
            "print(','.join(m for m in ('pydantic', 'typer', 'rich', 'yaml', 'jinja2') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
