"""Shared fixtures: a spec writer, the CLI runner, and the path of the example specs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

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
