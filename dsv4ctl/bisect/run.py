"""Flaky-aware bisection (issue 16): which of BAD's changes turn GOOD into BAD (ddmin over field paths), or from
which value of a numeric field a spec fails (a search over the range), judging every point by the failure rate of
real jobs. State lives in the store (m008_bisect), so a bisection killed anywhere resumes where it stopped: the
algorithm is replayed over the recorded probes, and only what was never asked is submitted.

A round's probes go out together, as one campaign. Each probe first gets the fewest runs that could tell it from
BAD (`bisect_rates.runs_to_tell`); while undecided it gets more, up to `cap`; `max_jobs` bounds the whole
bisection, and when it is spent the result says so (ddmin's current subset still fails; it may not be minimal).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import changes as changes_mod
from .rates import UNRESOLVED, UNTESTABLE, Rate, run_outcome
from .ddmin import Stopped
from ..errors import Dsv4Error, UsageError
from ..store import Store, now
from ..store.records import held, load_record

RUNNING, DONE = "running", "done"
MEASURED = "measured"  # an end measured to its target runs (GOOD, BAD, the ends of a range)


class BudgetSpent(Stopped):
    """The next round would pass --max-jobs."""


class NothingToBisect(Dsv4Error):
    """GOOD and BAD do not differ (in their specs, or in how often they fail)."""

    def __init__(self, message: str, rates: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.rates = rates or {}  # {"good": rate_json, "bad": rate_json} when the ends were measured


class BisectionNotFound(UsageError):
    """No stored bisection has the given id (exit 2, as every unknown name)."""


class BisectionBusy(UsageError):
    """Another process is running this bisection now: two would submit the same rounds twice."""


@dataclass
class Settings:
    backend: str
    runs_root: str
    max_jobs: int
    cap: int = 20  # runs per point at most
    base_runs: int = 5  # runs of each end before anything else
    threshold: float = 0.1  # boundary: the failure rate a value must exceed
    width: int = 3  # boundary: values probed per round

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Probe:
    id: int
    key: str
    role: str
    spec: Any  # ExperimentSpec, or None when the probe's spec is invalid
    invalid: str | None = None
    outcome: str | None = None


@dataclass
class Plan:
    kind: str
    points: str  # what is searched, in words
    worst_jobs: int
    node_hours: float | None
    max_jobs: int


def inputs_key(kind: str, inputs: dict[str, Any], settings: Settings) -> str:
    """The same command again finds its bisection: the resolved inputs and what decides the outcomes."""
    text = json.dumps({"kind": kind, "inputs": inputs, "backend": settings.backend, "cap": settings.cap,
                       "base_runs": settings.base_runs, "threshold": settings.threshold, "width": settings.width},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def find_or_create(store: Store, kind: str, inputs: dict[str, Any], changes: list[dict[str, Any]],
                   settings: Settings, command: str) -> tuple[int, bool]:
    """(bisection id, resumed): an unfinished or finished bisection of the same inputs, else a new one."""
    key = inputs_key(kind, inputs, settings)
    with store.transaction():
        row = store.db.execute("SELECT id FROM bisections WHERE inputs_key = ? ORDER BY id DESC LIMIT 1",
                               [key]).fetchone()
        if row:
            store.db.execute("UPDATE bisections SET settings_json = ?, updated_at = ? WHERE id = ?",
                             [json.dumps(settings.to_json()), now(), row[0]])
            return row[0], True
        new = store.db["bisections"].insert({
            "kind": kind, "inputs_key": key, "command": command, "backend": settings.backend,
            "inputs_json": json.dumps(inputs), "changes_json": json.dumps(changes),
            "settings_json": json.dumps(settings.to_json()), "state": RUNNING, "created_at": now(),
            "updated_at": now()}).last_pk
    return new, False


def load(store: Store, bisection_id: int) -> dict[str, Any]:
    return load_record(store, "bisections", bisection_id, ("inputs_json", "changes_json", "settings_json",
                                                           "result_json"), BisectionNotFound)


def finished(store: Store, key: str) -> tuple[int, dict[str, Any]] | None:
    """(id, result) of the finished bisection with these inputs, or None: run again, it prints without a job."""
    row = store.db.execute("SELECT id, result_json FROM bisections WHERE inputs_key = ? AND state = ? "
                           "AND result_json IS NOT NULL ORDER BY id DESC LIMIT 1", [key, DONE]).fetchone()
    return (row[0], json.loads(row[1])) if row else None


@contextmanager
def running(store: Store, bisection_id: int) -> Iterator[None]:
    """Hold bisection `bisection_id` for this process (an flock on a file beside the database, released however
    the process ends); a second process is refused with the pid that holds it."""
    path = store.path.with_name(f"{store.path.name}.bisect{bisection_id}.lock")
    busy = lambda holder: BisectionBusy(  # noqa: E731 - the message, read where the lock is taken
        f"bisection {bisection_id} is being run by {holder}: wait for it to end (then run the same command again "
        f"for its result), or follow it with `dsv4ctl bisect-report {bisection_id}`")
    with held(path, busy):
        yield


@dataclass
class Runner:
    """Probes of one bisection: recorded, submitted a round at a time, followed and judged."""

    store: Store
    bisection_id: int
    settings: Settings
    source: Path
    base_name: str
    on_progress: Callable[[str], None] = lambda line: None
    step: int = 0
    probes: dict[str, Probe] = field(default_factory=dict)

    # -- recording --

    def begin_step(self, what: str, keys: list[str]) -> int:
        self.step += 1
        with self.store.transaction():
            self.store.db["bisect_steps"].upsert({"bisection_id": self.bisection_id, "step": self.step,
                                                  "what": what, "probes_json": json.dumps(keys),
                                                  "created_at": now()}, pk=("bisection_id", "step"))
        return self.step

    def probe(self, key: str, role: str, data: dict[str, Any] | None, *, subset: tuple[int, ...] | None = None,
              value: int | None = None) -> Probe:
        """The probe of `key` (a subset or a value), recorded on first use with a spec name of its own."""
        if key in self.probes:
            return self.probes[key]
        db = self.store.db
        with self.store.transaction():
            row = db.execute("SELECT id, outcome FROM bisect_probes WHERE bisection_id = ? AND key = ?",
                             [self.bisection_id, key]).fetchone()
            if row is None:
                probe_id = db["bisect_probes"].insert({
                    "bisection_id": self.bisection_id, "key": key, "role": role, "step": self.step,
                    "subset_json": None if subset is None else json.dumps(list(subset)), "value": value,
                    "runs": 0, "failures": 0, "untestable": 0, "updated_at": now()}).last_pk
                name = changes_mod.probe_name(self.base_name, self.bisection_id, probe_id)
                db.execute("UPDATE bisect_probes SET spec_name = ? WHERE id = ?", [name, probe_id])
                row = (probe_id, None)
        name = changes_mod.probe_name(self.base_name, self.bisection_id, row[0])
        spec, why = changes_mod.validated(data, name, self.source) if data is not None else (None, "no spec")
        probe = Probe(row[0], key, role, spec, why, row[1])
        self.probes[key] = probe
        return probe

    def record(self, probe: Probe, rate: Rate, untestable: int, outcome: str | None) -> None:
        lo, hi = rate.interval
        with self.store.transaction():
            self.store.db["bisect_probes"].update(probe.id, {
                "runs": rate.runs, "failures": rate.failures, "untestable": untestable,
                "rate": rate.rate if rate.runs else None, "lo": lo, "hi": hi, "outcome": outcome,
                "updated_at": now()})
        probe.outcome = outcome

    # -- runs --

    def rate(self, probe: Probe) -> tuple[Rate, int, list[int]]:
        """(rate over judged testable runs, untestable runs, runs still in flight) of a probe."""
        if probe.spec is None:
            return Rate(0, 0), 0, []
        rows = self.store.runs(experiment=probe.spec.name)
        flying = {r.id for r in self.store.runs_in_flight([r.id for r in rows])}
        verdicts = self.store.verdict_summaries([r.id for r in rows])
        failures = runs = untestable = 0
        for row in rows:
            if row.id in flying or row.state in ("PLANNED", "SUBMITTING"):
                continue
            passed = verdicts[row.id]["passed"] if row.id in verdicts else None
            outcome = run_outcome(row.state, passed, bool(row.log_path) and Path(row.log_path).exists())
            if outcome == UNTESTABLE:
                untestable += 1
            else:
                runs += 1
                failures += outcome != "passed"
        return Rate(failures, runs), untestable, sorted(flying)

    def jobs_spent(self) -> int:
        names = [r[0] for r in self.store.db.execute(
            "SELECT spec_name FROM bisect_probes WHERE bisection_id = ?", [self.bisection_id])]
        return sum(len(self.store.runs(experiment=n)) for n in names if n)

    def follow(self) -> None:
        """Finish what a stopped CLI left: submit planned runs of this bisection's campaigns, wait for the rest."""
        from ..campaign.plan import resume
        from ..campaign.watch import watch

        campaigns = [r[0] for r in self.store.db.execute(
            "SELECT b.campaign FROM bisect_campaigns b JOIN campaigns c ON c.name = b.campaign "
            "WHERE b.bisection_id = ? AND c.submitted_at IS NULL", [self.bisection_id])]
        for name in campaigns:
            resume(self.store, name)
        ids = [r.id for name in self._all_campaigns() for r in self.store.runs(campaign=name)]
        if self.store.runs_in_flight(ids):
            watch(self.store, ids, interval_s=1.0, max_interval_s=5.0,
                  on_round=lambda report: self.on_progress(f"step {self.step}: {report.in_flight} job(s) in flight"))

    def _all_campaigns(self) -> list[str]:
        return [r[0] for r in self.store.db.execute(
            "SELECT b.campaign FROM bisect_campaigns b JOIN campaigns c ON c.name = b.campaign "
            "WHERE b.bisection_id = ?", [self.bisection_id])]

    def submit(self, wanted: list[tuple[Probe, int]]) -> None:
        from ..campaign.plan import PlannedRun
        from ..campaign.plan import submit as submit_campaign

        total = sum(n for _, n in wanted)
        spent = self.jobs_spent()
        if spent + total > self.settings.max_jobs:
            raise BudgetSpent(f"the next round needs {total} job(s); {spent} of --max-jobs "
                              f"{self.settings.max_jobs} are spent")
        count = self.store.db.execute("SELECT count(*) FROM bisect_campaigns WHERE bisection_id = ?",
                                      [self.bisection_id]).fetchone()[0]
        name = f"bisect{self.bisection_id}-s{self.step}-{count + 1}"
        with self.store.transaction():
            self.store.db["bisect_campaigns"].insert({"bisection_id": self.bisection_id, "campaign": name,
                                                      "step": self.step})
        planned = []
        for probe, n in wanted:
            start = len(self.store.runs(experiment=probe.spec.name))  # repeats continue: a payload's seed differs
            planned += [PlannedRun(probe.spec, self.source, {}, start + i) for i in range(n)]
        self.on_progress(f"step {self.step}: {total} job(s) for {len(wanted)} point(s) (campaign {name})")
        submit_campaign(self.store, [], self.settings.backend, campaign=name, runs_root=Path(self.settings.runs_root),
                        array=False, command=f"dsv4ctl bisect (bisection {self.bisection_id})", planned=planned)

    def settle(self, probes: list[Probe], decide: Callable[[Rate], str | None], need: Callable[[Rate], int],
               keep: bool = True) -> dict[str, tuple[str, Rate]]:
        """Run the probes until each is decided (or at its cap: UNRESOLVED); `keep` records the outcomes."""
        results: dict[str, tuple[str, Rate]] = {}
        while True:
            self.follow()
            wanted = []
            for probe in probes:
                rate, untestable, _ = self.rate(probe)
                if probe.invalid:
                    outcome = UNRESOLVED
                else:
                    outcome = decide(rate) or (UNRESOLVED if max(rate.runs, untestable) >= self.settings.cap
                                               else None)
                if outcome is None:
                    wanted.append((probe, max(1, need(rate))))
                    continue
                if keep or probe.outcome:
                    self.record(probe, rate, untestable, outcome)
                else:
                    self.record(probe, rate, untestable, None)
                results[probe.key] = (outcome, rate)
            if not wanted:
                return results
            self.submit(wanted)


def subset_key(subset: tuple[int, ...]) -> str:
    return "subset:" + ",".join(map(str, subset))
