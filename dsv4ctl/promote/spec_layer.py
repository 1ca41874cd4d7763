"""The spec half of `promote` (the spec layer may import it, as a mode's spec_rules): where the stable file is,
its switches read and checked against the registry, and spec data running a set of switches, which is what a
spec's `extends: stable` takes. Imports only the config, the errors and the switch registry: never the spec loader
(that would be a circle) nor a capability.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from ..errors import UsageError

STABLE_NAME = "stable.yaml"
STABLE_ENV = "DSV4CTL_STABLE"
MAX_STABLE_BYTES = 1 << 20


class StableError(UsageError):
    """The stable file is missing, unreadable, or breaks its format (exit 2, like a bad dsv4ctl.toml)."""


def locate(flag: Path | None = None, start: Path | None = None) -> Path:
    """--stable, then $DSV4CTL_STABLE, then dsv4ctl.toml's [promote] stable, then stable.yaml beside
    dsv4ctl.toml, then ./stable.yaml (the config found from `start`, default the current directory)."""
    from ..config import load_config

    if flag is not None:
        return Path(flag)
    if os.environ.get(STABLE_ENV):
        return Path(os.environ[STABLE_ENV])
    config = load_config(start)
    if config.stable is not None:
        return config.stable
    return (config.path.parent if config.path else Path.cwd()) / STABLE_NAME


def shown(key: Any) -> str:
    """A key as a message can print it: plain names bare, anything else quoted (a newline never splits a line)."""
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", key) else repr(key)[:80]


def parse_switches(raw: Any, where: str) -> dict[str, str]:
    from ..spec import switches as registry

    if not isinstance(raw, dict) or not raw:
        raise StableError(f"{where}: switches must be a mapping of NAME: VALUE, at least one")
    out = {}
    for name, value in raw.items():
        known = registry.BY_NAME.get(name) if isinstance(name, str) else None
        if known is None:
            close = registry.closest(str(name), 1) if isinstance(name, str) else []
            raise StableError(f"{where}: switches.{shown(name)}: not a known switch"
                              + (f" (did you mean {close[0]}?)" if close else " (`dsv4ctl switches` lists them)"))
        try:
            out[name] = known.normalise(value)
        except ValueError as exc:
            raise StableError(f"{where}: switches.{name}: {exc}") from None
    return out


def spec_with_switches(data: dict[str, Any], switches: dict[str, str], unset: list[str] = ()) -> dict[str, Any]:
    """Spec data running `switches`: a derived switch (DSV4_MOE_BACKEND) sets its field (model.moe_backend), the
    others go under `switches:`; names in `unset` are taken out of the spec's own switches."""
    from ..spec import switches as registry

    out = copy.deepcopy(data)
    own = dict(out.get("switches") or {})
    for name in unset:
        own.pop(name, None)
    for name, value in switches.items():
        known = registry.BY_NAME[name]
        if known.role == "derived" and known.derived_from:
            node = out
            *parents, leaf = known.derived_from.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        else:
            own[name] = value
    out["switches"] = own
    return out


def stable_spec_data(spec_path: Path) -> dict[str, Any]:
    """What `extends: stable` in the spec at `spec_path` starts from: the stable file's switches as spec data
    (the file found from the spec's folder). Only `switches:` is read here; `dsv4ctl stable` checks the rest.
    Anything wrong is the spec's SpecError, naming the spec and the stable file."""
    import yaml

    from ..errors import SpecError

    path = locate(None, Path(spec_path).resolve().parent)
    where = f"{spec_path}: `extends: stable`"
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_STABLE_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{where}, but {path} cannot be read ({exc.strerror or exc}): write the project's "
                        "stable.yaml beside dsv4ctl.toml, or `extends: ./stable` for a file named so") from None
    if len(data) > MAX_STABLE_BYTES:
        raise SpecError(f"{where}: {path} is larger than {MAX_STABLE_BYTES >> 20} MiB")
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"{where}: {path} is not readable ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(loaded, dict):
        raise SpecError(f"{where}: {path} is not a stable set (a mapping with switches:)")
    try:
        return spec_with_switches({}, parse_switches(loaded.get("switches"), str(path)))
    except StableError as exc:
        raise SpecError(f"{where}: {exc}") from None
