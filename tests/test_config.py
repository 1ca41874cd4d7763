"""The project config: dsv4ctl.toml found by walking up, flag > environment > config > default, the database in
use said on stderr (never in --json stdout), `dsv4ctl init`, and site defaults filled into specs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4ctl.store import open_store

from dsv4ctl.config import ConfigError, load_config, parse_config, resolve

from .conftest import BASE_SPEC, FIXTURES

LOGS = FIXTURES / "logs"


def dsv4ctl(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DSV4CTL_")}
    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *map(str, args)], capture_output=True, text=True,
                           cwd=cwd, env={**clean, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), **env},
                           timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "sub" / "deeper").mkdir(parents=True)
    assert dsv4ctl(root, "init").returncode == 0
    done = dsv4ctl(root, "ingest", "--log", LOGS / "J17.log", "--sacct", LOGS / "J17.sacct", "--experiment", "report")
    assert done.returncode == 0, done.stderr
    return root


def test_a_subdirectory_uses_the_projects_database(project):
    done = dsv4ctl(project / "sub" / "deeper", "runs", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["label"] for r in json.loads(done.stdout)] == ["J17"]  # stdout is the JSON alone
    assert f"using {project / 'results.db'} (from {project / 'dsv4ctl.toml'})" in done.stderr
    assert not (project / "sub" / "deeper" / "results.db").exists()


def test_nothing_is_said_about_the_obvious_database(project):
    done = dsv4ctl(project, "runs")
    assert done.returncode == 0 and "using" not in done.stderr


def test_flag_beats_environment_beats_config(project, tmp_path):
    other = tmp_path / "other.db"
    open_store(other)
    by_env = dsv4ctl(project / "sub", "runs", "--json", DSV4CTL_DB=str(other))
    assert json.loads(by_env.stdout) == [] and f"using {other} (from DSV4CTL_DB)" in by_env.stderr
    by_flag = dsv4ctl(project / "sub", "runs", "--json", "--db", project / "results.db", DSV4CTL_DB=str(other))
    assert len(json.loads(by_flag.stdout)) == 1 and "using" not in by_flag.stderr
    assert resolve(None, "DSV4CTL_NOT_SET_ANYWHERE", "cfg", "dflt", Path("c.toml")).origin == "c.toml"
    assert resolve(None, "DSV4CTL_NOT_SET_ANYWHERE", None, "dflt", None).is_default


def test_init_refuses_to_overwrite(project):
    again = dsv4ctl(project, "init")
    assert again.returncode == 2 and "exists already" in again.stderr
    config = load_config(project / "sub")
    assert config.path == project / "dsv4ctl.toml" and config.database == project / "results.db"


def test_a_typo_in_the_config_is_an_error_not_ignored(tmp_path):
    with pytest.raises(ConfigError, match="unknown key store.databse"):
        parse_config('[store]\ndatabse = "x.db"\n', tmp_path / "dsv4ctl.toml")
    (tmp_path / "dsv4ctl.toml").write_text("[store\n")
    done = dsv4ctl(tmp_path, "runs")
    assert done.returncode == 2 and "not valid TOML" in done.stderr and "Traceback" not in done.stderr


def test_site_defaults_fill_what_the_spec_leaves_out(tmp_path, monkeypatch):
    from dsv4ctl.spec.load import load_spec

    (tmp_path / "dsv4ctl.toml").write_text('[slurm]\npartition = "small"\nqos = "debug"\n'
                                           '[site]\nmodel_root = "/public/models"\nvenv = "/public/venv"\n'
                                           'modules = ["dtk/26.04"]\n')
    spec = tmp_path / "s.yaml"
    spec.write_text(BASE_SPEC.replace("/models/m", "m").replace('gres: "dcu:8"', 'gres: "dcu:8"\n  account: mine'))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSV4CTL_CONFIG", raising=False)
    loaded = load_spec(spec)[0].spec
    assert loaded.slurm.partition == "small" and loaded.slurm.account == "mine"  # the spec's own value stands
    assert loaded.slurm.extra == {"qos": "debug"} and loaded.model.path == "/public/models/m"
    assert loaded.environment.venv == "/public/venv" and loaded.environment.modules == ["dtk/26.04"]
