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

from ..errors import UsageError  # noqa: F401
from ..spec.tolerance import PerfReferenceError, is_duration, parse_tolerance  # noqa: F401 - the one reader, re-exported
from ..modes.offline.spec_rules import OFFLINE_METRICS  # noqa: F401 - re-exported

EXIT_OUTSIDE_REFERENCE = 4


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


def produced_metrics(mode: str) -> frozenset[str]:
    """The metrics a job of this mode records, the only ones a spec's reference can be checked against."""
    from ..spec.modes import SPEC_MODES

    return SPEC_MODES[mode].metrics()


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
            from .history import known_words

            raise PerfReferenceError(f"no measured {metric!r} in the runs given"
                                     + known_words(metric, sorted(samples), "metrics present"))
        kind = "min" if any(word in metric for word in HIGHER_IS_BETTER) else "max"
        block[metric] = {kind: round(median(values), 6), "tolerance": f"{tolerance * 100:g}%"}
    return block


def perf_lines(block: dict[str, dict[str, Any]], indent: int = 2) -> list[str]:
    """`perf:` and one flow-style line per metric, `indent` spaces in (plain text, no YAML library needed)."""
    lines = [" " * indent + "perf:"]
    for metric, bound in block.items():
        inner = ", ".join(f"{key}: {json.dumps(value)}" for key, value in bound.items())
        lines.append(" " * (indent + 2) + f"{metric}: {{{inner}}}")
    return lines


def perf_yaml(block: dict[str, dict[str, Any]]) -> str:
    """The `expect:` YAML text of a reference block."""
    return "\n".join(["expect:", *perf_lines(block)]) + "\n"


class SpecLayoutError(PerfReferenceError):
    """The spec file is written so that expect.perf cannot be replaced without losing its layout."""


def write_into_spec(text: str, block: dict[str, dict[str, Any]], file: str = "the spec") -> str:
    """The spec's text with `expect.perf` replaced (or added) by editing its lines: every other line, comment and
    flow style is kept as written. A layout this cannot edit (a flow-style `expect: {...}` or top level) is refused
    with SpecLayoutError, never rewritten through a YAML dump; the result is read back and checked."""
    import yaml

    from ..errors import SpecError

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{file}: not a YAML spec ({str(exc).splitlines()[0]})") from None
    if not isinstance(root, yaml.MappingNode) or not isinstance(data, dict):
        raise SpecError(f"{file}: not a YAML spec (a spec is a mapping of keys: name:, model:, ...)")
    lines = text.splitlines()
    edited = _edited_lines(root, lines, block, file)
    new_text = "\n".join(edited) + "\n"
    expect = dict(data.get("expect") or {})
    expect["perf"] = block
    if yaml.safe_load(new_text) != {**data, "expect": expect}:  # a layout the edit misread: say so, write nothing
        raise SpecLayoutError(f"{file}: expect.perf could not be replaced line by line")
    return new_text


def _edited_lines(root: Any, lines: list[str], block: dict[str, dict[str, Any]], file: str) -> list[str]:
    import yaml

    if root.flow_style:
        raise SpecLayoutError(f"{file}: its top level is written in flow style ({{...}})")
    expect = next(((k, v) for k, v in root.value if k.value == "expect"), None)
    if expect is None:  # a new top-level key at the end, at the top level's indentation
        column = root.value[0][0].start_mark.column if root.value else 0
        return _without_trailing(lines) + [" " * column + "expect:", *perf_lines(block, column + 2)]
    key, value = expect
    if not isinstance(value, yaml.MappingNode) or value.flow_style or not value.value:
        how = "written in flow style ({...})" if getattr(value, "flow_style", False) else "not a block of keys"
        raise SpecLayoutError(f"{file}:{key.start_mark.line + 1}: `expect:` is {how}: it cannot be edited "
                              "line by line without losing its layout")
    column = value.value[0][0].start_mark.column
    perf = next(((k, v) for k, v in value.value if k.value == "perf"), None)
    if perf is None:  # a new key after expect's last one
        end = _span_end(value, lines)
        return lines[:end] + perf_lines(block, column) + lines[end:]
    first, end = perf[0].start_mark.line, _span_end(perf[1], lines)
    return lines[:first] + perf_lines(block, column) + lines[end:]


def _span_end(node: Any, lines: list[str]) -> int:
    """The line after a node's last line (exclusive), less the blank and comment lines a block swallows."""
    mark = node.end_mark  # a block ends where the next token starts: that token's line is not the node's
    ends_before = mark.line >= len(lines) or not lines[mark.line][:mark.column].strip()
    end = mark.line + (0 if ends_before else 1)
    while end > node.start_mark.line + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return min(end, len(lines))


def _without_trailing(lines: list[str]) -> list[str]:
    """The lines up to the last one that holds something (`...` ends a document: nothing may follow it)."""
    kept = list(lines)
    while kept and not kept[-1].strip():
        kept.pop()
    if kept and kept[-1].strip() == "...":
        kept.pop()
    return kept


def spec_mismatch(path: Any, experiment: str) -> str | None:
    """Why a spec given to `reference set --spec` may not be the experiment's own (another name, not the base name
    of its matrix points), or None. A warning, not a refusal: ingested runs are named by `--experiment`, so the
    experiment `j17` may well have its spec in j17-baseline.yaml. SpecError when the file is not a YAML spec."""
    from ..errors import SpecError
    from ..spec.load import read_document

    try:
        data = read_document(path).data
    except SpecError as exc:
        raise SpecError(f"{path}: not a YAML spec ({exc})") from None
    name = data.get("name")
    if name == experiment or (data.get("matrix") and isinstance(name, str) and experiment.startswith(name + ".")):
        return None
    return (f"{path} is the spec of experiment {name!r}, not {experiment!r}: its runs will be checked against a "
            f"reference measured on the runs of {experiment!r}")


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


# A reference from fewer passed runs than this is warned about: below 6 the median has no bounded 95% interval
# (stats.median_ci), so one noisy run decides the bound and the next one reads as outside it.
MIN_REFERENCE_SAMPLES = 6


def few_samples_warning(samples: dict[str, list[float]], block: dict[str, Any]) -> str | None:
    """'gen_s comes from 1 passed run...' when a referenced metric has fewer than MIN_REFERENCE_SAMPLES values."""
    few = {m: len(samples.get(m) or []) for m in block if len(samples.get(m) or []) < MIN_REFERENCE_SAMPLES}
    if not few:
        return None
    said = ", ".join(f"{m} from {n} passed run{'s' if n != 1 else ''}" for m, n in sorted(few.items()))
    return (f"a reference from few samples ({said}): below {MIN_REFERENCE_SAMPLES} the median has no bounded 95% "
            f"interval and the next noisy run may read as OUTSIDE REFERENCE; --from a campaign of "
            f">= {MIN_REFERENCE_SAMPLES} runs (submit --repeats {MIN_REFERENCE_SAMPLES})")


@dataclass(frozen=True)
class StoredReference:
    """A reference stored by `dsv4ctl reference set`: the experiment, its `expect.perf` block, what it was
    measured on and when."""

    experiment: str
    perf: dict[str, Any]
    source: str
    set_at: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stored_references(store: Any, experiment: str | None = None) -> list[StoredReference]:
    """Every stored reference (by experiment name), or the one of `experiment` ([] when it has none)."""
    where, args = ("WHERE experiment = ?", [experiment]) if experiment is not None else ("", [])
    rows = store.db.execute(f"SELECT experiment, perf_json, source, set_at FROM perf_references {where} "
                            "ORDER BY experiment", args).fetchall()
    return [StoredReference(r[0], json.loads(r[1]), r[2] or "", r[3] or "") for r in rows]


def _no_reference(store: Any, experiment: str) -> PerfReferenceError:
    from .history import known_words

    known = [r.experiment for r in stored_references(store)]
    error = PerfReferenceError(f"no reference stored for {experiment!r}"
                               + known_words(experiment, known, "references stored for"))
    error.hint = f"`dsv4ctl reference set {experiment} --from CAMPAIGN` sets one; a spec's expect.perf is in the spec"
    return error


def reference_of(store: Any, experiment: str) -> StoredReference:
    """The reference stored for `experiment`; PerfReferenceError (exit 2) naming the ones stored when none."""
    found = stored_references(store, experiment)
    if not found:
        raise _no_reference(store, experiment)
    return found[0]


def save_reference(store: Any, experiment: str, block: dict[str, Any], source: str) -> StoredReference | None:
    """Store the reference of `experiment`; returns the one it replaces (None when it is the first)."""
    from ..store import now

    with store.transaction():
        before = stored_references(store, experiment)
        store.db.execute("INSERT OR REPLACE INTO perf_references (experiment, perf_json, source, set_at) "
                         "VALUES (?, ?, ?, ?)", [experiment, json.dumps(block), source, now()])
    return before[0] if before else None


def unset_reference(store: Any, experiment: str) -> StoredReference:
    """Remove the reference stored for `experiment` and return it; runs judged later are not checked against it
    (a spec's own expect.perf still applies to its runs)."""
    with store.transaction():
        removed = reference_of(store, experiment)
        store.db.execute("DELETE FROM perf_references WHERE experiment = ?", [experiment])
    return removed


def describe_reference(ref: StoredReference) -> str:
    """'gen_s max 8.1 (5%) from campaign c1, set 2026-12-01 22:40'."""
    bounds = "; ".join(f"{metric} " + " ".join(f"{k} {v}" for k, v in bound.items() if k != "tolerance")
                       + (f" ({bound['tolerance']})" if bound.get("tolerance") else "")
                       for metric, bound in sorted(ref.perf.items()))
    when = ref.set_at[:16].replace("T", " ")
    return f"{bounds} from {ref.source or 'unknown runs'}" + (f", set {when}" if when else "")
