"""Which runs are on each side of a comparison (issue 26 M3): sides are chosen, never guessed.

`compare --campaign C` takes an A/B campaign's own two sides; two experiment names that are the baseline and the
candidate of one `--ab` campaign mean that campaign (runs of those experiments outside it never pool in); any other
side names its runs (`campaign:NAME`, `experiment:NAME`, run ids, `tag:NAME`, a spec file, a label). `compare` and
a campaign's report take the sides with `ab_sides`, so both give the same numbers. A run the user cancelled is no
result: `set_aside_cancelled` leaves it out and says so. Reads the store; decides nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Dsv4Error, ExitCode, UsageError
from ..store import Store

# Columns of `runs` that say where and with what a run ran; the versions are read when the store has them.
PROVENANCE_COLUMNS = ("dsv4ctl_version", "git_sha", "node", "vllm_version", "torch_version", "triton_version")


class CompareError(Dsv4Error):
    """A side of the comparison matches no runs, or the metric cannot be compared."""


class NoSuchSide(CompareError, UsageError):
    """A side names no stored runs: something named that does not exist (exit 2), not a rejected candidate."""

    exit_code = int(ExitCode.USAGE)


# ---- sides --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompareRow:
    """What a comparison needs of one run, loaded in one joined query per chunk of runs."""

    id: int
    experiment_id: int
    experiment: str
    job_id: str | None
    state: str | None
    pair_id: int | None
    switches_json: str | None
    status: str | None  # the verdict's; None when not judged
    passed: bool
    false_green: bool
    first_blocker_kind: str | None
    provenance: tuple[tuple[str, str | None], ...] = ()
    metrics: dict[str, float] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Side:
    name: str
    runs: list[CompareRow]

    @property
    def experiments(self) -> list[str]:
        return sorted({r.experiment for r in self.runs})


_ROW_SQL = ("SELECT runs.id, runs.experiment_id, experiments.name, runs.job_id, runs.state, runs.pair_id, "
            "runs.switches_json, verdicts.status, verdicts.passed, verdicts.false_green, "
            "verdicts.first_blocker_kind{provenance} FROM runs JOIN experiments ON experiments.id = runs.experiment_id "
            "LEFT JOIN verdicts ON verdicts.run_id = runs.id WHERE runs.id IN ({marks}) ORDER BY runs.id")


def _provenance_columns(store: Store) -> list[str]:
    present = {row[1] for row in store.db.execute("PRAGMA table_info(runs)")}
    return [c for c in PROVENANCE_COLUMNS if c in present]


def load_rows(store: Store, run_ids: list[int]) -> list[CompareRow]:
    columns = _provenance_columns(store)
    sql = _ROW_SQL.replace("{provenance}", "".join(f", runs.{c}" for c in columns))
    rows: list[CompareRow] = []
    for start in range(0, len(run_ids), 900):
        chunk = run_ids[start:start + 900]
        marks = ",".join("?" * len(chunk))
        values: dict[int, dict[str, float]] = {}
        for run_id, name, value in store.db.execute(
                f"SELECT run_id, name, value FROM metrics WHERE run_id IN ({marks})", chunk):
            if value is not None:
                values.setdefault(run_id, {})[name] = value
        for row in store.db.execute(sql.replace("{marks}", marks), chunk):
            rows.append(CompareRow(*row[:8], bool(row[8]), bool(row[9]), row[10],
                                   tuple(zip(columns, row[11:])), values.get(row[0], {})))
    return rows


CANCELLED = "CANCELLED"  # the scheduler's state for a job someone stopped (scancel, `dsv4ctl cancel`)


def resolve_side(store: "Store", ref: str) -> "Side":
    """A side: `campaign:NAME` (every run of it), `experiment:NAME`, `tag:NAME`, run or job ids (`12,13,4711_2`,
    labels too), a spec file, an experiment name, or one run's label (J17)."""

    if ref.startswith("campaign:"):
        ids = [r.id for r in store.runs(campaign=ref.removeprefix("campaign:"))]
    elif ref.startswith("experiment:"):
        ids = [r.id for r in store.runs(experiment=ref.removeprefix("experiment:"))]
    elif ref.startswith("tag:"):
        tag = ref[4:]
        ids = [r[0] for r in store.db.execute("SELECT id, tags FROM runs") if tag in (r[1] or "").split(",")]
    elif "," in ref or ref.isdigit() or ref.startswith("runs:"):
        ids = [store.find_run(p).id for p in ref.removeprefix("runs:").split(",") if p]
    else:
        names = [ref]
        if Path(ref).is_file():
            from ..spec.load import load_spec

            names = sorted({p.spec.name for p in load_spec(ref) if p.spec})
        marks = ",".join("?" * len(names))
        ids = [r[0] for r in store.db.execute(f"SELECT runs.id FROM runs JOIN experiments ON experiments.id = "
                                              f"runs.experiment_id WHERE experiments.name IN ({marks})", names)]
        ids = ids or _run_by_label(store, ref)
    return Side(ref, load_rows(store, ids)) if ids else _none(ref)


def _run_by_label(store: "Store", ref: str) -> list[int]:
    """A run named by its label (J17) or `latest`, when no experiment has that name."""
    from ..store import RunNotFound

    try:
        return [store.find_run(ref).id]
    except RunNotFound:
        return []


def _none(ref: str) -> "Side":

    raise NoSuchSide(f"no stored runs match {ref!r} (an experiment name, a spec file, run ids, tag:NAME, "
                     "campaign:NAME or experiment:NAME; see `dsv4ctl runs`)")


def ab_sides(rows: list) -> tuple[list, list] | None:
    """The two sides of an A/B campaign: the runs `submit --ab` recorded as baseline and candidate, or else the
    runs of its two experiments, the first submitted as the baseline, unless they are two points of a matrix (a
    sweep of two values is not an A/B). None for anything else."""
    base = [r for r in rows if r.side == "baseline"]
    cand = [r for r in rows if r.side == "candidate"]
    if base and cand:
        return base, cand
    names = list(dict.fromkeys(r.experiment for r in rows))
    if len(names) != 2 or any(json.loads(r.data.get("point_json") or "{}") for r in rows):
        return None
    return [r for r in rows if r.experiment == names[0]], [r for r in rows if r.experiment == names[1]]


@dataclass
class ChosenSides:
    """The two sides, and what the choice left out, in words (said as warnings beside the comparison)."""

    baseline: "Side"
    candidate: "Side"
    notes: list[str] = field(default_factory=list)


def campaign_sides(store: "Store", campaign: str) -> ChosenSides:
    """An A/B campaign's own two sides (as its report takes them); a campaign that is not one is a usage error."""

    name = store.campaign_name(campaign)
    rows = store.runs(campaign=name)
    sides = ab_sides(rows)
    if sides is None:
        experiments = sorted({r.experiment for r in rows})
        raise UsageError(f"campaign {name!r} is not an A/B campaign ({len(rows)} run(s) of "
                         f"{', '.join(experiments) or 'no experiment'}): `submit --ab BASELINE CANDIDATE` makes one; "
                         f"compare two of its sets with `compare campaign:{name} ...` or run ids")
    base, cand = sides
    def side(label: str, part: list) -> "Side":
        experiments = ", ".join(dict.fromkeys(r.experiment for r in part))
        return Side(f"{experiments} (campaign {name} {label})", load_rows(store, [r.id for r in part]))

    return ChosenSides(side("baseline", base), side("candidate", cand))


def _is_plain_name(store: "Store", ref: str) -> bool:
    """A side written as a bare experiment name (not a prefix form, run ids, a spec file or a label)."""
    if ":" in ref or "," in ref or ref.isdigit() or Path(ref).is_file():
        return False
    return store.db.execute("SELECT 1 FROM experiments WHERE name = ?", [ref]).fetchone() is not None


def choose_sides(store: "Store", baseline: str | None, candidate: str | None,
                 campaign: str | None = None) -> ChosenSides:
    """The sides `compare` was asked for: `--campaign C`; two experiment names that one `--ab` campaign has as
    its sides (that campaign); anything else as `resolve_side` reads it."""
    if campaign is not None:
        if baseline is not None or candidate is not None:
            raise UsageError("give --campaign C (its own two sides) or BASELINE CANDIDATE, not both")
        return campaign_sides(store, campaign)
    if baseline is None or candidate is None:
        raise UsageError("give BASELINE CANDIDATE, or --campaign C for an A/B campaign's own two sides")
    if _is_plain_name(store, baseline) and _is_plain_name(store, candidate):
        from ..store.queries import ab_campaigns

        found = ab_campaigns(store, baseline, candidate)
        if len(found) > 1:
            raise UsageError(f"{baseline} and {candidate} are the sides of {len(found)} A/B campaigns "
                             f"({', '.join(found[:6])}): pick one with --campaign, or compare every run of the two "
                             f"experiments with experiment:{baseline} experiment:{candidate}")
        if found:
            chosen = campaign_sides(store, found[0])
            everything = resolve_side(store, baseline).runs + resolve_side(store, candidate).runs
            outside = len(everything) - len(chosen.baseline.runs) - len(chosen.candidate.runs)
            if outside:
                chosen.notes.append(f"{outside} other run(s) of {baseline} and {candidate} are outside it and left "
                                    f"out (experiment:{baseline} experiment:{candidate} pools every run)")
            return chosen
    return ChosenSides(resolve_side(store, baseline), resolve_side(store, candidate))


def set_aside_cancelled(side: "Side", label: str) -> tuple["Side", list[str]]:
    """The side without the runs the user cancelled (no result: neither a pass nor a failure), and a line saying
    which were left out."""

    cancelled = [r for r in side.runs if r.state == CANCELLED]
    if not cancelled:
        return side, []
    kept = [r for r in side.runs if r.state != CANCELLED]
    shown = ", ".join(f"{r.id}" for r in cancelled[:8]) + (" ..." if len(cancelled) > 8 else "")
    if not kept:
        raise CompareError(f"every run of the {label} ({side.name}) was cancelled: nothing to compare")
    return Side(side.name, kept), [f"left out of the {label}: {len(cancelled)} cancelled run(s) ({shown}): a "
                                   "cancelled run is no result, neither a pass nor a failure"]
