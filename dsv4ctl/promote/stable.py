"""The stable set as a file of the project: `stable.yaml` beside dsv4ctl.toml (or `[promote] stable = FILE` there,
or $DSV4CTL_STABLE, or --stable). It holds the switches and their values, the promotion that set each one
(provenance: date, commit, runs, figures) and the gates a change must pass:

    switches: {DSV4_USE_TRITON_SPARSE: "1", DSV4_MOE_ROUTING_Q1: "1", DSV4_MOE_BACKEND: emulation}
    provenance:
      DSV4_MOE_ROUTING_Q1: {promotion: 3, date: "2026-08-26", commit: 6e448d0, runs: [41, 42], figures: {...}}
    gates: {numerics: ..., e2e: ..., throughput: ...}        (see gates.py)

Parsed once into a `StableSet` (every switch checked against the registry, values normalised as the job gets
them); written back whole (comments are not kept) and atomically, only by a promotion.
"""

from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .gates import Gate, parse_gates
from .spec_layer import MAX_STABLE_BYTES, STABLE_ENV, STABLE_NAME, StableError, locate, parse_switches  # noqa: F401
from .spec_layer import shown, spec_with_switches  # noqa: F401

TOP_KEYS = ("switches", "provenance", "gates")
PROVENANCE_KEYS = ("promotion", "decision", "date", "commit", "runs", "figures", "note")
SHAPE = "a stable set is a mapping with switches:, provenance: and gates:"
HEADER = ("# The stable switch set (dsv4ctl promote writes this file; see docs/promotion.md).\n"
          "# Change a value only through `dsv4ctl promote SWITCH=VALUE`: each one's provenance says why.\n")


@dataclass(frozen=True)
class StableSet:
    path: Path
    switches: dict[str, str]
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    gates: dict[str, Gate] = field(default_factory=dict)
    raw_gates: dict[str, Any] | None = None
    text: str = ""

    @property
    def sha(self) -> str:
        """What the file said when read: a promotion started on another version of it is another promotion."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]


def load_stable(path: Path) -> StableSet:
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_STABLE_BYTES + 1)
    except FileNotFoundError:
        raise StableError(f"{path}: no stable set here: write one (docs/promotion.md), or name it with --stable "
                          "or [promote] stable in dsv4ctl.toml") from None
    except OSError as exc:
        raise StableError(f"{path}: cannot read the stable set: {exc.strerror or exc}") from None
    if len(data) > MAX_STABLE_BYTES:
        raise StableError(f"{path}: larger than {MAX_STABLE_BYTES >> 20} MiB; is it really a stable set?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StableError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_stable(text, Path(path))


def parse_stable(text: str, path: Path) -> StableSet:
    """A StableSet from the file's text; anything else is a one-line StableError (or GateError) naming the key."""
    from ..errors import SpecError
    from ..spec.load import parse_yaml

    try:
        data = parse_yaml(text, str(path)).data  # the spec loader's guards: depth, aliases, duplicate keys
    except SpecError as exc:  # in the loader's words for a spec; a stable set is said as one
        raise StableError(str(exc).replace("a spec must be a mapping of keys (name:, model:, ...)", SHAPE)) from None
    if not isinstance(data, dict):
        raise StableError(f"{path}: {SHAPE}")
    unknown = [str(k) for k in data if k not in TOP_KEYS]
    if unknown:
        raise StableError(f"{path}: unknown key {unknown[0]!r}; known: {', '.join(TOP_KEYS)}")
    switches = parse_switches(data.get("switches"), str(path))
    provenance = _provenance(data.get("provenance"), str(path), switches)
    gates = parse_gates(data.get("gates"), str(path), path.parent)
    return StableSet(path, switches, provenance, gates, data.get("gates"), text)


def _provenance(raw: Any, where: str, switches: dict[str, str]) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise StableError(f"{where}: provenance must be a mapping of switch name to its promotion")
    out = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not isinstance(entry, dict):
            raise StableError(f"{where}: provenance.{shown(name)} must be a mapping (promotion, date, commit, runs, "
                              "...)")
        bad = [str(k) for k in entry if k not in PROVENANCE_KEYS]
        if bad:
            raise StableError(f"{where}: provenance.{shown(name)}: unknown key {bad[0]!r}; known: "
                              f"{', '.join(PROVENANCE_KEYS)}")
        _check_entry(entry, f"{where}: provenance.{shown(name)}")
        out[name] = copy.deepcopy(entry)
    return out


def _check_entry(entry: dict[str, Any], where: str) -> None:
    promotion = entry.get("promotion")
    if promotion is not None and (isinstance(promotion, bool) or not isinstance(promotion, int)):
        raise StableError(f"{where}.promotion must be a promotion id")
    for key in ("decision", "date", "commit", "note"):
        if entry.get(key) is not None and not isinstance(entry[key], (str, int, float)):
            raise StableError(f"{where}.{key} must be text")
    runs = entry.get("runs", [])
    if not isinstance(runs, list) or any(isinstance(r, bool) or not isinstance(r, int) for r in runs):
        raise StableError(f"{where}.runs must be a list of run ids")
    figures = entry.get("figures", {})
    if not isinstance(figures, dict) or any(isinstance(v, (dict, list)) for v in figures.values()):
        raise StableError(f"{where}.figures must be a flat mapping of name: value")


# ---- changes ------------------------------------------------------------------------------------------------------


def changed_switches(switches: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """The set after `changes` (a value None takes the switch out: the registry default applies again)."""
    out = dict(switches)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def switch_diff(before: dict[str, str], after: dict[str, str]) -> list[dict[str, Any]]:
    """[{name, before, after}] for each switch whose value differs (None: not set)."""
    names = sorted(set(before) | set(after))
    return [{"name": n, "before": before.get(n), "after": after.get(n)} for n in names
            if before.get(n) != after.get(n)]


def render_stable(stable: StableSet, switches: dict[str, str], provenance: dict[str, dict[str, Any]]) -> str:
    import yaml

    data: dict[str, Any] = {"switches": dict(switches)}
    kept = {k: v for k, v in provenance.items() if k in switches or v.get("decision") == "demoted"}
    if kept:
        data["provenance"] = kept
    if stable.raw_gates is not None:
        data["gates"] = stable.raw_gates
    return HEADER + yaml.dump(data, Dumper=_dumper(), sort_keys=False, allow_unicode=True, default_flow_style=None,
                              width=100)


def _dumper():
    """PyYAML's safe dumper, but a text holding a line break YAML folds (NEL, LS, PS) is double-quoted, where it is
    escaped: written plain or single-quoted, NEL reads back as a space (found by the round-trip fuzz)."""
    import yaml

    class StableDumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str):
        style = '"' if any(c in value for c in "\x85\u2028\u2029") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    StableDumper.add_representer(str, text)
    return StableDumper


def write_stable(stable: StableSet, switches: dict[str, str], provenance: dict[str, dict[str, Any]]) -> str:
    """Write the new stable file whole or not at all; refuses when the file changed since it was read."""
    current = stable.path.read_text(encoding="utf-8")
    if current != stable.text:
        raise StableError(f"{stable.path} changed while the gates ran: nothing written; run promote again")
    text = render_stable(stable, switches, provenance)
    parse_stable(text, stable.path)  # what is written must read back
    tmp = stable.path.with_name(f".{stable.path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, stable.path)
    return text


def effective(switches: dict[str, str]) -> dict[str, str]:
    """What a job gets from the stable set: the registry's defaults, then the file's values."""
    from ..spec import switches as registry

    return {**registry.defaults(), **switches}


__all__ = ["STABLE_ENV", "STABLE_NAME", "MAX_STABLE_BYTES", "StableError", "StableSet", "locate", "load_stable",
           "parse_stable", "parse_switches", "shown", "spec_with_switches", "changed_switches", "switch_diff",
           "render_stable", "write_stable", "effective"]
