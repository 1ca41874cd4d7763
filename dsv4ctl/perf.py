"""Performance references (issue 17): each run's stored metrics checked against `expect.perf`, after ReFrame's
reference-with-tolerance checks. A correct run outside its reference stays `passed`; the failure is recorded beside
the verdict (table `perf_checks`) and `dsv4ctl verdict RUN` exits 4 for it.

Where a run's reference comes from: its spec's `expect.perf`, else the reference stored for its experiment by
`dsv4ctl reference set` (table `perf_references`), which is how ingested runs, which have no spec, get one.
Pure functions first; the two store hooks at the end.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from .errors import UsageError

EXIT_OUTSIDE_REFERENCE = 4


class PerfReferenceError(UsageError, ValueError):
    """A performance reference that cannot be read (no bound, a tolerance that is not a number or a percentage)."""


def parse_tolerance(value: str | float | int | None) -> float:
    """`'5%'` -> 0.05, `0.05` -> 0.05: a percentage up to 1000%, or a bare fraction below 1. A bare number of 1 or
    more is refused (issue 29): `5` would mean 500%, and whoever writes it almost always means 5%."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise PerfReferenceError(f"tolerance {value!r} is not a number")
    text = value.strip() if isinstance(value, str) else None
    try:
        if text is not None and text.endswith("%"):
            fraction, percent = float(text[:-1]) / 100, True
        else:
            fraction, percent = float(value if text is None else text), False
    except (TypeError, ValueError):
        raise PerfReferenceError(f"tolerance {value!r}: write a fraction (0.05) or a percentage (5%)") from None
    if not percent and math.isfinite(fraction) and fraction >= 1:
        fraction_meant = f" or {fraction / 100:g}" if fraction < 100 else ""  # a bare 1 or more is what we refuse
        raise PerfReferenceError(f"tolerance {value!r}: {fraction:g} would mean {fraction:.0%}: "
                                 f"write {fraction:g}%{fraction_meant}")
    if not 0 <= fraction <= 10:  # also refuses nan (every comparison with it is false)
        raise PerfReferenceError(f"tolerance {value!r} out of range (0 to 1000%)")
    return fraction


@dataclass(frozen=True)
class PerfFailure:
    """One metric outside its reference (or missing from the run)."""

    metric: str
    kind: str  # "max" | "min"
    bound: float
    tolerance: float
    limit: float  # the bound widened by the tolerance
    value: float | None  # None: the run has no such metric

    @property
    def message(self) -> str:
        if self.value is None:
            return f"{self.metric}: not measured (reference {self.kind} {self.bound:g})"
        word = "above" if self.kind == "max" else "below"
        ratio = self.value / self.bound if self.bound else float("inf")
        return (f"{self.metric} {self.value:g} {word} its reference {self.kind} {self.bound:g} "
                f"+{self.tolerance:.0%} (limit {self.limit:g}; {ratio:.3f}x)")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


def check_perf(perf_spec: dict[str, Any] | None, metrics: dict[str, float]) -> list[PerfFailure]:
    """The metrics outside their references: `max` fails above max * (1 + tolerance), `min` below
    min * (1 - tolerance); a referenced metric the run did not record fails too (never hidden)."""
    failures = []
    for metric, bound in sorted((perf_spec or {}).items()):
        tolerance = parse_tolerance(bound.get("tolerance"))
        if bound.get("max") is not None:
            kind, value_bound = "max", float(bound["max"])
            limit = value_bound * (1 + tolerance)
        elif bound.get("min") is not None:
            kind, value_bound = "min", float(bound["min"])
            limit = value_bound * (1 - tolerance)
        else:
            raise PerfReferenceError(f"expect.perf.{metric}: give `max` or `min`")
        value = metrics.get(metric)
        outside = value is None or (value > limit if kind == "max" else value < limit)
        if outside:
            failures.append(PerfFailure(metric, kind, value_bound, tolerance, limit, value))
    return failures


# Metrics where larger is better get a `min` reference; every other metric (times, memory) a `max`.
HIGHER_IS_BETTER = ("tokens_per_s", "throughput", "requests_per_s", "output_tokens")


def reference_from(samples: dict[str, list[float]], tolerance: float,
                   metrics: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """An `expect.perf` block from measured samples: each metric's median as its bound, with `tolerance`."""
    from .stats import median

    block: dict[str, dict[str, Any]] = {}
    for metric in sorted(metrics or samples):
        values = samples.get(metric) or []
        if not values:
            raise PerfReferenceError(f"no measured {metric!r} in the runs given")
        kind = "min" if any(word in metric for word in HIGHER_IS_BETTER) else "max"
        block[metric] = {kind: round(median(values), 6), "tolerance": f"{tolerance * 100:g}%"}
    return block


def perf_yaml(block: dict[str, dict[str, Any]]) -> str:
    """The `expect:` YAML text of a reference block (plain text, no YAML library needed)."""
    lines = ["expect:", "  perf:"]
    for metric, bound in block.items():
        inner = ", ".join(f"{key}: {json.dumps(value)}" for key, value in bound.items())
        lines.append(f"    {metric}: {{{inner}}}")
    return "\n".join(lines) + "\n"


def write_into_spec(text: str, block: dict[str, dict[str, Any]]) -> str:
    """The spec's text with `expect.perf` replaced (or added), other keys kept as written. Round-trips through the
    YAML library: comments in the file are lost, said by the command."""
    import yaml

    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise PerfReferenceError("the spec file is not a mapping")
    expect = data.get("expect") or {}
    expect["perf"] = block
    data["expect"] = expect
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# ---- store hooks -------------------------------------------------------------------------------------------------


def reference_for(store: Any, run_id: int) -> tuple[dict[str, Any] | None, str | None]:
    """The reference a run is checked against and where it comes from ("spec" or "reference set")."""
    row = store.db.execute("SELECT e.spec_json, e.name FROM runs r JOIN experiments e ON e.id = r.experiment_id "
                           "WHERE r.id = ?", [run_id]).fetchone()
    if row is None:
        return None, None
    try:
        spec = json.loads(row[0] or "{}")
    except ValueError:
        spec = {}
    perf = (spec.get("expect") or {}).get("perf") if isinstance(spec, dict) else None
    if perf:
        return perf, "spec"
    stored = store.db.execute("SELECT perf_json FROM perf_references WHERE experiment = ?", [row[1]]).fetchone()
    return (json.loads(stored[0]), "reference set") if stored else (None, None)


def record_check(store: Any, run_id: int, passed: bool, metrics: dict[str, float]) -> None:
    """Check a judged run against its reference and record the result (none recorded without a reference). A run
    that failed the correctness gate is not checked: its figures mean nothing."""
    store.db.execute("DELETE FROM perf_checks WHERE run_id = ?", [run_id])
    reference, source = reference_for(store, run_id)
    if not reference or not passed:
        return
    failures = check_perf(reference, metrics)
    store.db.execute("INSERT INTO perf_checks (run_id, within, source, reference_json, failures_json) "
                     "VALUES (?, ?, ?, ?, ?)",
                     [run_id, int(not failures), source, json.dumps(reference),
                      json.dumps([f.to_json() for f in failures])])


def stored_check(store: Any, run_id: int) -> dict[str, Any] | None:
    """A run's recorded reference check: {within, source, reference, failures}, or None when it has none."""
    row = store.db.execute("SELECT within, source, reference_json, failures_json FROM perf_checks WHERE run_id = ?",
                           [run_id]).fetchone()
    if row is None:
        return None
    return {"within": bool(row[0]), "source": row[1], "reference": json.loads(row[2]),
            "failures": json.loads(row[3])}


def outside_reference(store: Any, run_ids: list[int]) -> set[int]:
    """Which of these runs passed but were recorded outside their reference."""
    out: set[int] = set()
    for start in range(0, len(run_ids), 900):
        chunk = run_ids[start:start + 900]
        out |= {row[0] for row in store.db.execute(
            f"SELECT run_id FROM perf_checks WHERE within = 0 AND run_id IN ({','.join('?' * len(chunk))})", chunk)}
    return out


def save_reference(store: Any, experiment: str, block: dict[str, Any], source: str) -> None:
    from .store import now

    with store.transaction():
        store.db.execute("INSERT OR REPLACE INTO perf_references (experiment, perf_json, source, set_at) "
                         "VALUES (?, ?, ?, ?)", [experiment, json.dumps(block), source, now()])
