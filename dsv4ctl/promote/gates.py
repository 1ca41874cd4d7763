"""The three gates a switch passes, in order, to enter the stable set (report §0.3): numerics, end to end,
throughput. Each is declared once, in the stable file's `gates:` section, and each decision here is a pure function
of what its runs gave: `passed`, `failed`, or `could not decide` (the gate could not run: sbatch refused, every run
lost, a numerics command that exits 125). A gate that could not run is never a failure and never a pass.

    numerics:   {spec: gates/numerics.yaml}        or {command: "python check.py", timeout_s: 3600}
    e2e:        {spec: gates/e2e.yaml, repeats: 60, max_failure_rate: 0.06}
    throughput: {spec: gates/ab.yaml, metric: gen_s, repeats: 6, factor: 1.03}

Every gate takes `overrides:` (spec data merged over its spec). Paths are relative to the stable file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..limits import MAX_REPEATS

GATE_ORDER = ("numerics", "e2e", "throughput")
PASSED, FAILED, UNDECIDED = "passed", "failed", "could not decide"
REQUIRES = ("faster", "not_slower")
COMMAND_PASS, COMMAND_FAIL, COMMAND_UNTESTABLE = 0, 1, 125  # git bisect run's codes


class GateError(UsageError):
    """The stable file's `gates:` section is missing a gate or holds a value no decision can be made with."""


@dataclass(frozen=True)
class Gate:
    name: str
    spec: Path | None = None
    command: str | None = None
    repeats: int = 1
    max_failure_rate: float | None = None  # e2e
    metric: str = "gen_s"  # throughput
    factor: float = 1.03
    alpha: float = 0.05
    require: str = "faster"
    timeout_s: float = 3600.0  # numerics command
    overrides: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        """The keys this kind of gate takes (a numerics gate has no metric), as the file would say them."""
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k == "name" or k in _KEYS[self.name]}
        if self.command:
            data.pop("repeats", None)
        else:
            data.pop("timeout_s", None)
        return {k: v for k, v in data.items() if v not in (None, {})}


@dataclass(frozen=True)
class GateResult:
    """One gate's decision, its reason in one line, its figures and the runs it rests on."""

    gate: str
    outcome: str
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    runs: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "outcome": self.outcome, "reason": self.reason, "figures": self.figures,
                "runs": self.runs}


# ---- declarations -------------------------------------------------------------------------------------------------

_KEYS = {"numerics": {"spec", "command", "repeats", "timeout_s", "overrides"},
         "e2e": {"spec", "repeats", "max_failure_rate", "overrides"},
         "throughput": {"spec", "repeats", "metric", "factor", "alpha", "require", "overrides"}}


def parse_gates(raw: Any, where: str, base: Path) -> dict[str, Gate]:
    """The `gates:` mapping: each gate checked, its spec path taken relative to `base` (the stable file's folder)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise GateError(f"{where}: gates must be a mapping of {', '.join(GATE_ORDER)}")
    gates = {}
    for name, value in raw.items():
        if name not in _KEYS:
            raise GateError(f"{where}: unknown gate {name!r}; the gates are {', '.join(GATE_ORDER)}")
        gates[name] = _gate(name, value, f"{where}: gates.{name}", base)
    return {name: gates[name] for name in GATE_ORDER if name in gates}


def _gate(name: str, value: Any, where: str, base: Path) -> Gate:
    if not isinstance(value, dict):
        raise GateError(f"{where} must be a mapping (spec: FILE, ...)")
    unknown = sorted(str(k) for k in value if k not in _KEYS[name])
    if unknown:
        raise GateError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(sorted(_KEYS[name]))}")
    spec, command = value.get("spec"), value.get("command")
    if (spec is None) == (command is None):
        raise GateError(f"{where}: give a spec" + (" or a command, not both" if name == "numerics" else ""))
    if spec is not None and not (isinstance(spec, str) and spec and "\x00" not in spec):
        raise GateError(f"{where}.spec must be a file path")
    if command is not None and not (isinstance(command, str) and command.strip() and "\x00" not in command):
        raise GateError(f"{where}.command must be a command line")
    overrides = value.get("overrides", {})
    if not isinstance(overrides, dict):
        raise GateError(f"{where}.overrides must be a mapping of spec fields")
    gate = Gate(name, spec=base / spec if spec else None, command=command, overrides=overrides,
                repeats=_whole(value.get("repeats", _default_repeats(name)), f"{where}.repeats"),
                timeout_s=_number(value.get("timeout_s", 3600.0), f"{where}.timeout_s", 1, 7 * 86400))
    if name == "e2e":
        return _e2e(gate, value, where)
    if name == "throughput":
        return _throughput(gate, value, where)
    return gate


def _default_repeats(name: str) -> int:
    return {"numerics": 1, "e2e": 60, "throughput": 6}[name]


def _e2e(gate: Gate, value: dict, where: str) -> Gate:
    if "max_failure_rate" not in value:
        raise GateError(f"{where}: give max_failure_rate (the largest failure rate accepted, 0.05 = 5%)")
    rate = _number(value["max_failure_rate"], f"{where}.max_failure_rate", 0, 1)
    if rate >= 1:
        raise GateError(f"{where}.max_failure_rate must be below 1")
    needed = clean_runs_to_bound(rate)
    if needed is None or gate.repeats < needed:
        raise GateError(f"{where}: {gate.repeats} clean run(s) bound the failure rate at "
                        f"{wilson_upper(0, gate.repeats):.1%} at most (Wilson 95%), never at "
                        f"{rate:g}: give repeats >= {needed}" if needed else
                        f"{where}: no number of runs bounds a failure rate at {rate:g}: raise max_failure_rate")
    return Gate(**{**gate.__dict__, "max_failure_rate": rate})


def _throughput(gate: Gate, value: dict, where: str) -> Gate:
    from ..analysis.stats import ci_min_samples, min_samples

    metric = value.get("metric", "gen_s")
    if not (isinstance(metric, str) and metric.isidentifier()):
        raise GateError(f"{where}.metric must be a metric name (gen_s)")
    factor = _number(value.get("factor", 1.03), f"{where}.factor", 1, 100)
    alpha = _number(value.get("alpha", 0.05), f"{where}.alpha", 0, 1)
    if not 0 < alpha < 1:
        raise GateError(f"{where}.alpha must be between 0 and 1")
    require = value.get("require", "faster")
    if require not in REQUIRES:
        raise GateError(f"{where}.require must be one of: {', '.join(REQUIRES)}")
    # `faster` needs compare's promote (bounded medians); `not_slower` needs at least the runs with which the
    # test can reach alpha at all, or the gate could never refuse anything.
    least = ci_min_samples(0.95) if require == "faster" else min_samples(alpha)
    if gate.repeats < least:
        raise GateError(f"{where}: repeats {gate.repeats} is too few: " + (
            f">= {least} pairs give the medians a bounded 95% interval" if require == "faster" else
            f">= {least} pairs are needed for a slowdown to be significant at alpha {alpha:g}"))
    return Gate(**{**gate.__dict__, "metric": metric, "factor": factor, "alpha": alpha, "require": require})


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPEATS:
        raise GateError(f"{where} must be a whole number in 1..{MAX_REPEATS}")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise GateError(f"{where} must be a number in {low:g}..{high:g}")
    return float(value)


# ---- decisions ----------------------------------------------------------------------------------------------------


def wilson_upper(failures: int, runs: int) -> float:
    from ..campaign.sweep import wilson

    return wilson(failures, runs)[1]


def clean_runs_to_bound(rate: float) -> int | None:
    """The fewest runs that, all passing, bound the failure rate at `rate` (Wilson 95% upper end); None above
    MAX_REPEATS (0.05 takes 73)."""
    if rate <= 0 or wilson_upper(0, MAX_REPEATS) > rate:
        return None
    low, high = 1, MAX_REPEATS  # the upper bound of 0/n falls as n grows: the first n within `rate`
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if wilson_upper(0, mid) <= rate else (mid + 1, high)
    return low


def decide_numerics_runs(outcomes: list[str]) -> tuple[str, str]:
    """A numerics spec: every run passes. A failure fails it; a run that could not be tested leaves it undecided."""
    failed = outcomes.count("failed")
    lost = outcomes.count("untestable")
    if failed:
        return FAILED, f"{failed} of {len(outcomes)} numerics run(s) failed"
    if lost or not outcomes:
        return UNDECIDED, f"{lost} of {len(outcomes)} numerics run(s) could not be tested (refused, lost, no log)"
    return PASSED, f"{len(outcomes)} numerics run(s) passed"


def decide_command(code: int, command: str) -> tuple[str, str]:
    """A numerics command: 0 passes, 125 (or a signal, or a time-out) cannot test, anything else fails."""
    if code == COMMAND_PASS:
        return PASSED, f"`{command}` exited 0"
    if code == COMMAND_UNTESTABLE or code < 0 or code >= 124:
        return UNDECIDED, f"`{command}` exited {code}: it could not test"
    return FAILED, f"`{command}` exited {code}"


def decide_e2e(failures: int, testable: int, lost: int, max_rate: float) -> tuple[str, str]:
    """Refused once the Wilson 95% upper bound of the failure rate is above `max_rate` even if every lost run had
    passed; passed once it is at most `max_rate`; runs lost in between leave it undecided."""
    seen = f"{failures}/{testable} failed"
    best = wilson_upper(failures, testable + lost)
    upper = wilson_upper(failures, testable) if testable else 1.0
    if best > max_rate and (failures or not lost):
        return FAILED, (f"{seen}: the failure rate may be up to {upper:.1%} (Wilson 95% upper bound), above "
                        f"max_failure_rate {max_rate:g}")
    if lost:
        return UNDECIDED, f"{seen}, {lost} run(s) could not be tested: the rate is not bounded at {max_rate:g}"
    return PASSED, f"{seen}: the failure rate is at most {upper:.1%} (Wilson 95%), within {max_rate:g}"


def decide_throughput(metric: Any, require: str, factor: float) -> tuple[str, str]:
    """From compare's MetricComparison of the candidate against the stable set: `faster` needs compare's promote
    (better by `factor`, significant, bounded medians); `not_slower` refuses only a significant slowdown past
    `factor`."""
    why = "; ".join(metric.reasons)
    if metric.decision == "blocked":
        return FAILED, why
    if require == "faster":
        return (PASSED, why) if metric.decision == "promote" else (FAILED, f"not shown faster by {factor:g}x: {why}")
    worse = metric.ratio and (metric.ratio if metric.direction == "lower" else 1 / metric.ratio)
    if metric.significant and worse and worse > factor:
        return FAILED, f"slower by {worse:.3f}x (> {factor:g}x): {why}"
    return PASSED, f"not slower by more than {factor:g}x: {why}"
