"""Where the project's data folders live, in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    # A wheel carries the folder inside the package as `_name`; a checkout has it beside the package.
    installed = _PACKAGE / f"_{name}"
    return installed if installed.is_dir() else _PACKAGE.parent / name


def templates_dir() -> Path:
    return _data_dir("templates")


def runtime_dir() -> Path:
    return _data_dir("runtime")


def project_root() -> Path:
    return _PACKAGE.parent
