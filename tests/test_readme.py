"""The README is the door and the docs site the reference: help blocks are the real ones, the two commands are CI's,
the site builds with warnings and broken links as errors."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT

COMMANDS = ROOT / "docs" / "reference" / "commands.md"


def test_help_blocks_match_the_cli():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "help_blocks.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci_last = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
               if line.strip() and not line.startswith(("#", "set ", "cd "))][-1]
    assert ci_last.strip() in readme


def test_every_command_is_documented():
    reference = COMMANDS.read_text(encoding="utf-8")
    for command in ("validate", "render", "expand", "switches", "verdict"):
        assert f"<!-- help: {command} -->" in reference and f"dsv4ctl {command}" in reference


def test_the_readme_is_a_door():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= 16 * 1024, f"README.md is {len(readme)} bytes: move reference material into docs/"
    text = readme.decode("utf-8")
    # The report, J08 and the project folder are explained before they are used.
    assert text.index("the report") < text.index("J08") < text.index("./scripts/demo")
    assert "This folder is the project" in text


def test_the_docs_site_builds_strict(tmp_path):
    """MkDocs with --strict: a broken internal link, a missing nav page or a stale --help block fails it."""
    result = subprocess.run([str(ROOT / "scripts" / "docs")], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (ROOT / "build" / "site" / "reference" / "commands" / "index.html").is_file()
    assert (ROOT / "build" / "site" / "zh" / "quickstart" / "index.html").is_file()
