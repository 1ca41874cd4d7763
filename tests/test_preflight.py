"""Pre-flight against the live cluster: `validate --cluster` asks sbatch --test-only whether a job could ever run,
before anything is queued (the J17 spec as written sat PENDING forever on a small partition)."""

from __future__ import annotations

import json

import pytest

from .conftest import EXPERIMENTS
from .test_slurm import cluster  # noqa: F401  (the live-cluster fixture)




@pytest.mark.slurm
def test_a_job_the_partition_can_never_run_is_refused_before_it_is_queued(cli, cluster):  # noqa: F811
    from dsv4ctl import external

    squeue_before = external.run(["squeue", "-h", "-o", "%i"]).stdout
    done = cli("validate", "--cluster", "--json", EXPERIMENTS / "j17-baseline.yaml", EXPERIMENTS / "cpu-smoke.yaml")
    assert done.exit_code == 1
    by_name = {entry["name"]: entry["cluster"] for entry in json.loads(done.stdout)}
    assert by_name["j17-baseline"]["ok"] is False
    assert "node configuration is not available" in by_name["j17-baseline"]["message"]
    assert by_name["cpu-smoke"]["ok"] is True and "to start at" in by_name["cpu-smoke"]["message"]
    assert external.run(["squeue", "-h", "-o", "%i"]).stdout == squeue_before  # nothing was queued


def test_without_sbatch_the_flag_is_an_error_not_a_pass(cli, monkeypatch):
    from dsv4ctl.errors import Dsv4Error

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(Dsv4Error, match="sbatch"):
        cli("validate", "--cluster", EXPERIMENTS / "cpu-smoke.yaml")


def _dsv4ctl(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dsv4ctl.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.slurm
def test_submit_check_refuses_a_point_the_cluster_can_never_run_and_records_nothing(cluster, tmp_path):  # noqa: F811
    from dsv4ctl import external

    squeue_before = external.run(["squeue", "-h", "-o", "%i"]).stdout
    db = tmp_path / "r.db"
    done = _dsv4ctl("submit", "--check", EXPERIMENTS / "j17-baseline.yaml", EXPERIMENTS / "cpu-smoke.yaml",
                    "--backend", "slurm", "--db", db, "--runs-dir", tmp_path / "runs")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: j17-baseline: the cluster would never run it: ")
    assert "node configuration is not available" in lines[0]
    assert not db.exists() and not (tmp_path / "runs").exists()  # nothing recorded, no run folder
    assert external.run(["squeue", "-h", "-o", "%i"]).stdout == squeue_before  # nothing queued
    # a point the cluster accepts passes the check (a dry run, so nothing is queued either)
    ok = _dsv4ctl("submit", "--check", "--dry-run", EXPERIMENTS / "cpu-smoke.yaml", "--backend", "slurm", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["backend"] == "slurm", ok.stderr


def test_submit_check_is_for_the_slurm_backend_only(tmp_path):
    done = _dsv4ctl("submit", "--check", EXPERIMENTS / "cpu-smoke.yaml", "--backend", "local", "--db",
                    tmp_path / "r.db")
    assert done.returncode == 2 and "--check asks Slurm" in done.stderr and "local backend" in done.stderr
    assert not (tmp_path / "r.db").exists()
