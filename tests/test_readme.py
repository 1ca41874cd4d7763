"""The README is part of the product: its help blocks are the real ones, its two commands are CI's."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_help_blocks_match_the_cli():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_help.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci_last = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
               if line.strip() and not line.startswith(("#", "set ", "cd "))][-1]
    assert ci_last.strip() in readme


def test_every_command_is_documented():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for command in ("validate", "render", "expand", "switches", "verdict"):
        assert f"<!-- help: {command} -->" in readme and f"dsv4ctl {command}" in readme
