"""Rewrite (or, with --check, verify) the `--help` blocks embedded in README.md.

Blocks sit between `<!-- help: CMD -->` and `<!-- /help -->`; CMD is a dsv4ctl command or `dsv4ctl` itself.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from typer.testing import CliRunner

README = Path(__file__).resolve().parent.parent / "README.md"
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
    text = README.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in sys.argv:
        if new != text:
            print("README.md help blocks are stale: run `.venv/bin/python scripts/readme_help.py`")
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
