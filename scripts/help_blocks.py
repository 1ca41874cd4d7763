"""Rewrite (or, with --check, verify) the `--help` blocks embedded in the docs (the cog approach: generated from the
CLI, checked by the tests, so they cannot drift).

Blocks sit between `<!-- help: CMD -->` and `<!-- /help -->`; CMD is a dsv4ctl command or `dsv4ctl` itself.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(<!-- help: (?P<cmd>[\w-]+) -->\n)```text\n.*?```\n(<!-- /help -->)", re.S)


def help_text(command: str) -> str:
    from dsv4ctl.cli import app

    os.environ["COLUMNS"] = "100"
    args = ["--help"] if command == "dsv4ctl" else [command, "--help"]
    result = CliRunner().invoke(app, args, prog_name="dsv4ctl", terminal_width=100)
    return result.output


def render(text: str) -> str:
    return BLOCK.sub(lambda m: f"{m.group(1)}```text\n{help_text(m.group('cmd'))}```\n{m.group(3)}", text)


def main() -> int:
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = render(text) if "<!-- help: " in text else text
        if new == text:
            continue
        if "--check" in sys.argv:
            stale.append(str(page.relative_to(ROOT)))
        else:
            page.write_text(new, encoding="utf-8")
    if stale:
        print(f"help blocks are stale in {', '.join(stale)}: run `.venv/bin/python scripts/help_blocks.py`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
