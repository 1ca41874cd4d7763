"""What a bisection changes: every difference between two resolved specs (one field path = one change), a probe's
spec (GOOD with a subset of BAD's changes applied), a numeric field set to a value, and the worst-case cost.

Pure functions over the specs' resolved JSON snapshots (after `extends` and site defaults, with every default
written out): a switch, a model argument, a sampling or an environment value that BAD sets differently is a change;
a value BAD writes that equals GOOD's default is not.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..analysis.differences import IGNORED_KEYS  # one list of what is bookkeeping, not a change (the snapshot has no label)
from ..errors import UsageError

MAX_CHANGES = 64  # ddmin asks up to n² + 3n subsets: beyond this, split the specs by hand first


@dataclass(frozen=True)
class Change:
    """One field path whose value BAD changes: absent on a side is `*_missing` (the spec does not write it)."""

    path: tuple[str, ...]
    good: Any
    bad: Any
    good_missing: bool = False
    bad_missing: bool = False

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def text(self) -> str:
        def shown(value: Any, missing: bool) -> str:
            return "(unset)" if missing else json.dumps(value, ensure_ascii=False)

        return f"{self.name}: {shown(self.good, self.good_missing)} -> {shown(self.bad, self.bad_missing)}"

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "name": self.name, "good": self.good, "bad": self.bad,
                "good_missing": self.good_missing, "bad_missing": self.bad_missing}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Change":
        return cls(tuple(data["path"]), data["good"], data["bad"], data["good_missing"], data["bad_missing"])


def _walk(good: Any, bad: Any, path: tuple[str, ...]) -> list[Change]:
    if isinstance(good, dict) and isinstance(bad, dict):
        out: list[Change] = []
        for key in sorted(set(good) | set(bad), key=str):
            if not path and key in IGNORED_KEYS:
                continue
            if key in good and key in bad:
                out += _walk(good[key], bad[key], path + (str(key),))
            else:
                out.append(Change(path + (str(key),), good.get(key), bad.get(key), key not in good, key not in bad))
        return out
    return [] if good == bad else [Change(path, good, bad)]


def changes_between(good: dict[str, Any], bad: dict[str, Any]) -> list[Change]:
    """Every leaf where BAD differs from GOOD, in field-path order. A list is one value (requests, modules)."""
    changes = _walk(good, bad, ())
    if len(changes) > MAX_CHANGES:
        raise UsageError(f"the specs differ in {len(changes)} fields, above {MAX_CHANGES}: bisect a smaller step "
                         "(a spec halfway between them) first")
    return changes


def apply_changes(good: dict[str, Any], changes: list[Change], subset: tuple[int, ...]) -> dict[str, Any]:
    """GOOD's snapshot with the changes of `subset` (indices into `changes`) applied."""
    data = copy.deepcopy(good)
    for index in subset:
        change = changes[index]
        node = data
        for part in change.path[:-1]:
            node = node.setdefault(part, {})
        if change.bad_missing:
            node.pop(change.path[-1], None)
        else:
            node[change.path[-1]] = copy.deepcopy(change.bad)
    return data


def set_field(spec: dict[str, Any], field: str, value: int) -> dict[str, Any]:
    """The snapshot with the numeric field at dotted path `field` set to `value`; UsageError when the path is not
    a field of the spec."""
    data = copy.deepcopy(spec)
    node, parts = data, field.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise UsageError(f"--field {field}: {part!r} is not a section of the spec")
        node = node[part]
    if parts[-1] not in node:
        raise UsageError(f"--field {field}: no such field in the resolved spec")
    current = node[parts[-1]]
    if current is not None and (isinstance(current, bool) or not isinstance(current, int)):
        raise UsageError(f"--field {field}: holds {json.dumps(current)}, not a whole number")
    node[parts[-1]] = value
    return data


MAX_RANGE_VALUE = 999_999_999  # |LOW|, |HIGH| at most: a probe value is stored as a plain SQLite integer


def parse_range(text: str) -> tuple[int, int]:
    """`1..64` -> (1, 64); the start below the end, both within MAX_RANGE_VALUE (the field's own bounds are
    checked against the spec: `check_field_range`)."""
    found = re.fullmatch(r"\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*", text)
    if not found:
        raise UsageError(f"--range {text!r}: write LOW..HIGH with whole numbers (1..64)")
    for digits in found.groups():
        if len(digits.lstrip("-")) > 12 or abs(int(digits)) > MAX_RANGE_VALUE:  # never int() of 5,000 digits
            shown = digits if len(digits) <= 20 else digits[:17] + "..."
            raise UsageError(f"--range {text[:60]!r}: {shown} is outside the values a range may hold "
                             f"(-{MAX_RANGE_VALUE}..{MAX_RANGE_VALUE})")
    low, high = int(found.group(1)), int(found.group(2))
    if high - low < 1:
        raise UsageError(f"--range {text!r}: LOW must be below HIGH")
    return low, high


def check_field_range(spec: dict[str, Any], field: str, low: int, high: int) -> None:
    """Both ends of --range within the field's own bounds (`batch` starts at 1): a value the spec refuses would
    spend jobs on probes that can only be UNRESOLVED."""
    from pydantic import ValidationError

    from ..spec.models import ExperimentSpec
    from ..spec.wording import structural_message

    for value in (low, high):
        try:
            ExperimentSpec.model_validate(set_field(spec, field, value))
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                if ".".join(map(str, error["loc"])) == field:
                    raise UsageError(f"--range {low}..{high}: {field}={value}: {structural_message(error)}") \
                        from None


def probe_name(base: str, bisection_id: int, probe_id: int) -> str:
    """A spec name of its own per probe, so a probe's runs are its experiment's runs."""
    suffix = f".b{bisection_id}p{probe_id}"
    return base[:128 - len(suffix)].rstrip(".") + suffix


def validated(data: dict[str, Any], name: str, source: Path):
    """(ExperimentSpec, None), or (None, why) when the probe's spec breaks a rule (an UNRESOLVED probe)."""
    from pydantic import ValidationError

    from ..spec.rules import check_spec
    from ..spec.models import ExperimentSpec

    try:
        spec = ExperimentSpec.model_validate({**data, "name": name})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return None, f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
    errors = [f for f in check_spec(spec) if f.severity == "error"]
    if errors:
        return None, f"{errors[0].path}: {errors[0].message}"
    return spec, None


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_hours(time: str | None) -> float | None:
    """sbatch's --time as hours (minutes; MM:SS; HH:MM:SS; D-HH; D-HH:MM; D-HH:MM:SS), None when not set."""
    found = _TIME.match(time or "")
    if not found:
        return None
    days, a, b, c = found.groups()
    if days is not None:
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
    elif c is not None:
        hours, minutes, seconds = int(a), int(b), int(c)
    elif b is not None:
        hours, minutes, seconds = 0, int(a), int(b)
    else:
        hours, minutes, seconds = 0, int(a), 0
    return int(days or 0) * 24 + hours + minutes / 60 + seconds / 3600


def boundary_values_bound(low: int, high: int, width: int) -> int:
    """Distinct values a boundary search may probe: both ends, then `width` per round, each round cutting the
    interval to 1/(width+1)."""
    size = high - low + 1
    rounds = math.ceil(math.log(max(size, 2)) / math.log(width + 1)) + 1
    return min(size, 2 + width * rounds)
