"""Provenance: the versions a job ran (printed by the probe, read from the head of raw.log, stored per run, listed by
`compare` and shown by the report), and a golden taken from a stored run (`expect.golden_from`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dsv4ctl.versions import read_versions, versions_in

from .conftest import FIXTURES, ROOT

LOGS = FIXTURES / "logs"
J17_VERSIONS = {"vllm_version": "0.27.2.dev0+g6e448d0ea.d20260819", "torch_version": "2.5.1+das.opt1.dtk2604"}


def test_the_probe_prints_the_triton_version_beside_vllm(tmp_path):
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text(
        "__version__ = '0.11.1'\nclass ModelRegistry:\n    @staticmethod\n"
        "    def get_supported_archs():\n        return ['Arch']\n")
    (fake / "triton").mkdir()
    (fake / "triton" / "__init__.py").write_text("__version__ = '3.2.0'\n")
    code = "from dsv4rt import probe; probe.registry_stage({'model': {'arch': 'Arch'}})"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "VLLM_"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": f"{ROOT / 'runtime'}:{fake}"})
    assert done.returncode == 0, done.stderr
    assert "vllm 0.11.1\ntriton 3.2.0\n" in done.stdout
    assert versions_in(done.stdout) == {"vllm_version": "0.11.1", "triton_version": "3.2.0"}


def test_versions_are_read_from_the_lines_the_probe_prints():
    probe = ("### STAGE: env\npython 3.12.3 on x86_64 Linux\ntorch 2.6.0+cpu, cuda available: False, devices: 0\n"
             "### STAGE: vllm import + registry\nvllm 0.11.1\ntriton 3.2.0\n")
    assert versions_in(probe) == {"torch_version": "2.6.0+cpu", "vllm_version": "0.11.1", "triton_version": "3.2.0"}
    # the report's jobs print torch inside the python line; a module that failed to import names no version
    assert versions_in((LOGS / "J17.log").read_text()) == J17_VERSIONS
    assert versions_in("torch not importable: No module named 'torch'\ntriton not importable: x\n") == {}


def test_only_the_head_of_a_log_is_read(tmp_path):
    log = tmp_path / "raw.log"
    log.write_text("x" * 70_000 + "\nvllm 0.11.1\n")
    assert read_versions(log) == {}
    assert read_versions(log, head_bytes=80_000) == {"vllm_version": "0.11.1"}
    assert read_versions(tmp_path / "missing.log") == {} and read_versions(None) == {}


def test_an_ingested_run_records_its_versions(cli, tmp_path):
    db = str(tmp_path / "r.db")
    cli("ingest", "--log", LOGS / "J17.log", "--sacct", LOGS / "J17.sacct", "--experiment", "report", "--db", db)
    run = json.loads(cli("show", "J17", "--db", db, "--json").stdout)
    assert {k: run[k] for k in J17_VERSIONS} == J17_VERSIONS and run["triton_version"] is None


def test_a_judged_run_records_its_versions_and_compare_lists_a_vllm_change(cli, tmp_path):
    from .test_slurm import spec_file

    newer = tmp_path / "newer.log"
    newer.write_text((LOGS / "J17.log").read_text().replace("vllm 0.27.2.dev0+g6e448d0ea.d20260819", "vllm 0.28.0"))
    db = str(tmp_path / "r.db")
    for name, log in (("old", LOGS / "J17.log"), ("new", newer)):
        done = cli("submit", spec_file(tmp_path, name, {"REPLAY_LOG": str(log)}), "--backend", "local", "--wait",
                   "--db", db, "--runs-dir", tmp_path / "runs", "--json")
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["runs"][0]["torch_version"] == J17_VERSIONS["torch_version"]
    compared = json.loads(cli("compare", "old", "new", "--db", db, "--json").stdout)
    assert {"key": "provenance.vllm_version", "baseline": [J17_VERSIONS["vllm_version"]],
            "candidate": ["0.28.0"]} in compared["differences"]


def _dsv4ctl(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *map(str, args)], capture_output=True, text=True)


def test_a_golden_is_taken_from_a_stored_runs_verdict_at_submit_time(cli, tmp_path):
    from .test_slurm import spec_file

    db = str(tmp_path / "r.db")
    cli("ingest", "--log", LOGS / "J17.log", "--sacct", LOGS / "J17.sacct", "--experiment", "report", "--db", db)
    stored = json.loads(cli("show", "J17", "--db", db, "--json").stdout)
    golden = [r["token_ids"] for r in stored["verdict"]["requests"]]
    spec = spec_file(tmp_path, "again", {"REPLAY_LOG": str(LOGS / "J17.log")}, extra="expect: {golden_from: J17}\n")
    done = cli("submit", spec, "--backend", "local", "--wait", "--db", db, "--runs-dir", tmp_path / "runs", "--json")
    assert done.exit_code == 0, done.output
    run = json.loads(done.stdout)["runs"][0]
    snapshot = json.loads((tmp_path / "runs" / run["campaign"] / "again").glob("*/spec.json").__next__().read_text())
    assert snapshot["expect"]["golden_token_ids"] == golden and snapshot["expect"]["golden_from"] == "J17"
    assert run["verdict"]["passed"]
    # a replay that parts from J17's tokens fails against the golden
    wrong = tmp_path / "wrong.log"
    wrong.write_text((LOGS / "J17.log").read_text().replace(f"TOKEN_IDS: [{golden[0][0]}, ", "TOKEN_IDS: [7, ", 1))
    spec = spec_file(tmp_path, "parted", {"REPLAY_LOG": str(wrong)}, extra="expect: {golden_from: J17}\n")
    done = cli("submit", spec, "--backend", "local", "--wait", "--db", db, "--runs-dir", tmp_path / "runs", "--json")
    verdict = json.loads(done.stdout)["runs"][0]["verdict"]
    assert done.exit_code == 1 and "diverges from the golden at token 0" in " ".join(verdict["reasons"])


def test_a_golden_from_an_unknown_or_unjudged_run_is_refused_before_anything_is_recorded(tmp_path):
    from dsv4ctl.store import open_store

    from .test_slurm import spec_file

    db = tmp_path / "r.db"
    store = open_store(db)
    store.add_run(experiment_id=store.experiment_id("e", "h", "{}", "x"), backend="local", token="t",
                  state="PENDING", ingested=0, label="J50")
    store.close()
    for ref, said in (("J99", "expect.golden_from: no run 'J99'"), ("J50", "run 'J50' (run 1) has no verdict yet")):
        spec = spec_file(tmp_path, "g", {}, extra=f"expect: {{golden_from: {ref}}}\n")
        done = _dsv4ctl("submit", spec, "--backend", "local", "--db", db, "--runs-dir", tmp_path / "runs")
        assert done.returncode == 1 and said in done.stderr, done.stderr
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert [r.label for r in open_store(db).runs()] == ["J50"] and not (tmp_path / "runs").exists()
