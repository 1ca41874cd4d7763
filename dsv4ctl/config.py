"""The project config: `dsv4ctl.toml`, found by walking up from the current directory (like git finds `.git`), so
every subdirectory of a project uses the same database and runs directory.

Precedence for each setting: a command-line flag, then its environment variable, then the config, then the built-in
default. Paths in the config are relative to the config file's folder. Standard library only (tomllib).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import Dsv4Error, UsageError

CONFIG_NAME = "dsv4ctl.toml"
CONFIG_ENV = "DSV4CTL_CONFIG"  # a config file to use instead of searching; "none" searches nothing
DB_ENV = "DSV4CTL_DB"
RUNS_DIR_ENV = "DSV4CTL_RUNS_DIR"
BACKEND_ENV = "DSV4CTL_BACKEND"
DEFAULT_DB = "results.db"
DEFAULT_RUNS_DIR = "runs"
DEFAULT_BACKEND = "auto"

# [section] key -> the attribute of ProjectConfig it sets, and whether it is a path
_KEYS: dict[tuple[str, str], tuple[str, type]] = {
    ("store", "database"): ("database", Path),
    ("store", "runs_dir"): ("runs_dir", Path),
    ("scheduler", "backend"): ("backend", str),
    ("slurm", "partition"): ("partition", str),
    ("slurm", "account"): ("account", str),
    ("slurm", "qos"): ("qos", str),
    ("site", "model_root"): ("model_root", str),
    ("site", "venv"): ("venv", str),
    ("site", "modules"): ("modules", list),
    ("promote", "stable"): ("stable", Path),  # the stable switch set (dsv4ctl/promote), else stable.yaml beside
}


class ConfigError(Dsv4Error):
    """dsv4ctl.toml cannot be read, or holds a key or value dsv4ctl does not know."""

    exit_code = 2


@dataclass(frozen=True)
class ProjectConfig:
    """What a dsv4ctl.toml sets; None where it says nothing. `path` is the file (None: no config found)."""

    path: Path | None = None
    database: Path | None = None
    runs_dir: Path | None = None
    backend: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    model_root: str | None = None
    venv: str | None = None
    modules: list[str] = field(default_factory=list)
    stable: Path | None = None


def find_config(start: Path | None = None) -> Path | None:
    """The nearest dsv4ctl.toml at or above `start` (default: the current directory), or $DSV4CTL_CONFIG."""
    chosen = os.environ.get(CONFIG_ENV)
    if chosen:
        return None if chosen.lower() == "none" else Path(chosen)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def parse_config(text: str, path: Path) -> ProjectConfig:
    """A ProjectConfig from TOML text; unknown sections or keys are refused (a typo must not be ignored)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    values: dict[str, Any] = {"path": path}
    known = ", ".join(f"{s}.{k}" for s, k in _KEYS)
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {section!r} is not a [section]; known keys: {known}")
        for key, value in table.items():
            if (section, key) not in _KEYS:
                raise ConfigError(f"{path}: unknown key {section}.{key}; known keys: {known}")
            name, kind = _KEYS[(section, key)]
            if kind is list:
                if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                    raise ConfigError(f"{path}: {section}.{key} must be a list of strings")
            elif not isinstance(value, str) or not value:
                raise ConfigError(f"{path}: {section}.{key} must be a non-empty string")
            values[name] = (path.parent / value) if kind is Path else value
    return ProjectConfig(**values)


def load_config(start: Path | None = None) -> ProjectConfig:
    """The project config in effect here (an empty one when there is none)."""
    path = find_config(start)
    if path is None:
        return ProjectConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
    return parse_config(text, path.resolve())


@dataclass(frozen=True)
class Resolved:
    """A setting's value and where it came from (`--db`, `DSV4CTL_DB`, the config file, or the default)."""

    value: Any
    origin: str

    @property
    def is_default(self) -> bool:
        return self.origin == "default"


def resolve(flag: Any, env: str, configured: Any, default: Any, config_path: Path | None) -> Resolved:
    """Flag > environment > config > default."""
    if flag is not None:
        return Resolved(flag, "flag")
    if os.environ.get(env):
        return Resolved(os.environ[env], env)
    if configured is not None:
        return Resolved(configured, str(config_path))
    return Resolved(default, "default")


def database(flag: str | os.PathLike[str] | None = None) -> Resolved:
    config = load_config()
    found = resolve(flag, DB_ENV, config.database, DEFAULT_DB, config.path)
    return Resolved(Path(found.value), found.origin)


def runs_dir(flag: Path | None = None) -> Path:
    config = load_config()
    return Path(resolve(flag, RUNS_DIR_ENV, config.runs_dir, DEFAULT_RUNS_DIR, config.path).value)


def backend(flag: str | None = None) -> str:
    config = load_config()
    return resolve(flag, BACKEND_ENV, config.backend, DEFAULT_BACKEND, config.path).value


def database_note(found: Resolved, journal: str | None = None) -> str | None:
    """What to tell the user about the database in use, unless it is the obvious ./results.db; `journal` (the
    line of a database on a shared filesystem, not in WAL mode) is said always."""
    if found.origin == "flag" or Path(found.value).resolve() == (Path.cwd() / DEFAULT_DB).resolve():
        return f"using {Path(found.value).resolve()}: {journal}" if journal else None  # named, or the obvious
    where = f"from {found.origin}" if not found.is_default else "the default"
    return f"using {Path(found.value).resolve()} ({where})" + (f"; {journal}" if journal else "")


STARTER = """\
# dsv4ctl project config. dsv4ctl finds this file by walking up from the current directory, so every
# subdirectory of the project uses the same database and runs directory. Paths are relative to this file.
# Precedence: a command-line flag, then its environment variable, then this file, then the default.

[store]
database = "results.db"        # --db, DSV4CTL_DB
runs_dir = "runs"              # --runs-dir, DSV4CTL_RUNS_DIR

[scheduler]
backend = "auto"               # --backend, DSV4CTL_BACKEND: slurm, local, or auto (slurm when sbatch is on PATH)

[slurm]
# Used when a spec's slurm: section does not set them.
# partition = "debug"
# account = "myproject"
# qos = "normal"

[site]
# Where things are on the compute nodes; used when a spec does not say.
# model_root = "/public/models"     # a relative model.path is taken under it
# venv = "/public/venvs/vllm"       # environment.venv
# modules = ["dtk/26.04"]           # environment.modules
"""


def write_starter(directory: Path) -> Path:
    """Write a commented dsv4ctl.toml in `directory`; refuse to overwrite one."""
    path = directory / CONFIG_NAME
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(STARTER)
    except FileExistsError:
        raise UsageError(f"{path} exists already: edit it, or remove it first") from None
    return path


def site_defaults(config: ProjectConfig) -> dict[str, Any]:
    """What the config adds to a spec that does not set it, as spec data (see `specload`)."""
    defaults: dict[str, Any] = {}
    slurm = {k: v for k, v in (("partition", config.partition), ("account", config.account)) if v}
    if slurm:
        defaults["slurm"] = slurm
    if config.qos:
        defaults.setdefault("slurm", {})["extra"] = {"qos": config.qos}
    environment: dict[str, Any] = {}
    if config.venv:
        environment["venv"] = config.venv
    if config.modules:
        environment["modules"] = list(config.modules)
    if environment:
        defaults["environment"] = environment
    return defaults
