"""One gate of a promotion as real work: its specs built from the gate's spec, the stable set (baseline) and the
change (candidate); its campaign recorded, submitted (or resumed) and followed; its runs judged by `gates`."""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import store as promo_store
from .gates import FAILED, PASSED, UNDECIDED, Gate, GateResult, decide_command, decide_e2e, decide_numerics_runs
from .gates import decide_throughput
from .stable import effective, spec_with_switches
from ..errors import Dsv4Error, SpecInvalid
from ..store import Store

SIDES = ("base", "cand")


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out


@dataclass
class GateRunner:
    store: Store
    promotion_id: int
    prepared: Any  # run.Prepared
    settings: Any  # run.Settings
    on_progress: Callable[[str], None]
    retry: bool = False  # a promotion that could not decide, run again: its lost runs are resubmitted

    def run(self, gate: Gate) -> GateResult:
        self.on_progress(f"gate {gate.name}: starting")
        if gate.command:
            return self._command(gate)
        try:
            specs = {side: self.spec(gate, side) for side in (SIDES if gate.name == "throughput" else ("cand",))}
        except (SpecInvalid, Dsv4Error) as exc:
            return GateResult(gate.name, UNDECIDED, f"the gate's spec cannot be built: {exc}")
        rows = self._runs(gate, specs)
        if gate.name == "throughput":
            return self._throughput(gate, specs, rows)
        outcomes = [self._outcome(r) for r in rows]
        ids = [r.id for r in rows]
        if gate.name == "numerics":
            outcome, reason = decide_numerics_runs(outcomes)
            return GateResult(gate.name, outcome, reason, {"summary": reason}, ids)
        failures, lost = outcomes.count("failed"), outcomes.count("untestable")
        outcome, reason = decide_e2e(failures, failures + outcomes.count("passed"), lost, gate.max_failure_rate)
        from .gates import wilson_upper

        testable = len(outcomes) - lost
        figures = {"failures": failures, "runs": testable, "lost": lost, "max_failure_rate": gate.max_failure_rate,
                   "upper": wilson_upper(failures, testable) if testable else None,
                   "summary": f"{failures}/{testable} failed"}
        return GateResult(gate.name, outcome, reason, figures, ids)

    # -- specs --

    def spec(self, gate: Gate, side: str):
        """The gate's spec with the stable set (base) or the changed set (cand), under a name of its own."""
        from ..bisect.changes import validated
        from ..spec.load import select_point

        data = merged(select_point(gate.spec, None).snapshot(), gate.overrides)
        switches = self.prepared.baseline if side == "base" else self.prepared.candidate
        removed = [n for n, v in self.prepared.changes.items() if v is None] if side == "cand" else []
        data = spec_with_switches(data, switches, removed)
        name = f"{data['name']}.p{self.promotion_id}{gate.name[0]}-{side}"
        spec, why = validated(data, name, gate.spec)
        if spec is None:
            raise Dsv4Error(f"{gate.spec}: {why}")
        return spec

    # -- runs --

    def _runs(self, gate: Gate, specs: dict[str, Any]) -> list:
        """The gate's runs, submitted once: recorded before sbatch, resumed if killed before all went out."""
        from ..campaign.plan import PlannedRun, resume, submit

        name = f"promo{self.promotion_id}-{gate.name}"
        state = promo_store.campaign_state(self.store, name)
        if state is None:
            promo_store.add_campaign(self.store, self.promotion_id, gate.name, name)
            planned, pairs = [], []
            for i in range(gate.repeats):
                for pair_side, side in (("baseline", "base"), ("candidate", "cand")):
                    if side in specs:
                        planned.append(PlannedRun(specs[side], gate.spec, {}, i))
                        pairs.append((i, pair_side))
            self.on_progress(f"gate {gate.name}: {len(planned)} job(s) (campaign {name})")
            submit(self.store, [], self.settings.backend, campaign=name, runs_root=Path(self.settings.runs_root),
                   array=False, command=f"dsv4ctl promote (promotion {self.promotion_id})",
                   pairs=pairs if len(specs) == 2 else None, planned=planned)
        elif state == "planned" or self.retry:
            outcome = resume(self.store, name)
            self.on_progress(f"gate {gate.name}: resumed campaign {name}: {len(outcome.run_ids)} job(s) "
                             f"submitted, {outcome.kept} kept")
        self._follow(gate, name)
        return self.store.runs(campaign=name)

    def _follow(self, gate: Gate, campaign: str) -> None:
        from ..campaign.watch import watch

        ids = [r.id for r in self.store.runs(campaign=campaign)]
        if self.store.runs_in_flight(ids):
            watch(self.store, ids, interval_s=1.0, max_interval_s=5.0,
                  on_round=lambda report: self.on_progress(f"gate {gate.name}: {report.in_flight} job(s) in flight"))

    def _outcome(self, row) -> str:
        from ..bisect.rates import run_outcome

        verdict = self.store.verdict_summaries([row.id]).get(row.id)
        has_log = bool(row.log_path) and Path(row.log_path).exists()
        return run_outcome(row.state, verdict["passed"] if verdict else None, has_log)

    def _throughput(self, gate: Gate, specs: dict[str, Any], rows: list) -> GateResult:
        from ..analysis.compare import Side, compare_sides, load_rows

        ids = [r.id for r in rows]
        by_side = {side: [r for r in rows if r.experiment == specs[side].name] for side in SIDES}
        outcomes = {side: [(r, self._outcome(r)) for r in by_side[side]] for side in SIDES}
        testable = {side: [r.id for r, o in outcomes[side] if o != "untestable"] for side in SIDES}
        lost = sum(o == "untestable" for side in SIDES for _, o in outcomes[side])
        failed = {side: sum(o == "failed" for _, o in outcomes[side]) for side in SIDES}
        if not testable["base"] or not testable["cand"]:
            return GateResult(gate.name, UNDECIDED, f"{lost} of {len(rows)} throughput run(s) could not be tested "
                              "(refused by the scheduler, lost, no log): nothing to compare", {"lost": lost}, ids)
        if failed["cand"]:
            return GateResult(gate.name, FAILED, f"{failed['cand']} candidate run(s) did not pass their verdict: "
                              "the speed of a broken run is not compared", {"failed": failed["cand"]}, ids)
        if failed["base"]:
            return GateResult(gate.name, UNDECIDED, f"{failed['base']} run(s) of the stable set itself did not "
                              "pass: the baseline is broken, fix it first", {"failed": failed["base"]}, ids)
        try:
            result = compare_sides(self.store, Side("stable", load_rows(self.store, testable["base"])),
                                   Side("candidate", load_rows(self.store, testable["cand"])), gate.metric,
                                   gate.alpha, gate.factor, better=None)
        except Dsv4Error as exc:
            return GateResult(gate.name, UNDECIDED, f"the A/B could not be compared: {exc}", {}, ids)
        metric = result.metric(gate.metric)
        outcome, reason = decide_throughput(metric, gate.require, gate.factor)
        figures = {"metric": gate.metric, "baseline_median": metric.baseline.median,
                   "candidate_median": metric.candidate.median, "ratio": metric.ratio, "p_value": metric.p_value,
                   "pairs": min(len(testable["base"]), len(testable["cand"])), "lost": lost,
                   "compare": result.decision,
                   "summary": f"{gate.metric} {_num(metric.baseline.median)} -> {_num(metric.candidate.median)}"
                              f" ({_num(metric.ratio)}x, p {_num(metric.p_value)})"}
        if lost and outcome == PASSED:
            reason += f" ({lost} run(s) lost, compared without them)"
        return GateResult(gate.name, outcome, reason, figures, ids)

    # -- numerics as a command --

    def _command(self, gate: Gate) -> GateResult:
        from .. import external

        argv = shlex.split(gate.command)
        cwd = self.prepared.stable.path.resolve().parent
        if "/" in argv[0] and (cwd / argv[0]).exists():
            argv[0] = str(cwd / argv[0])
        env = {**effective(self.prepared.candidate),
               "DSV4_PROMOTE_CHANGE": ",".join(f"{k}={'' if v is None else v}"
                                               for k, v in self.prepared.changes.items())}
        try:
            done = external.run(argv, cwd=cwd, timeout=gate.timeout_s, env=env)
        except Dsv4Error as exc:
            return GateResult(gate.name, UNDECIDED, f"`{gate.command}` could not start: {exc}")
        outcome, reason = decide_command(done.returncode, gate.command)
        tail = (done.stdout.strip() or done.stderr.strip()).splitlines()[-1:] or [""]
        return GateResult(gate.name, outcome, reason, {"exit": done.returncode, "said": tail[0][:300],
                                                       "summary": f"exit {done.returncode}"})


def _num(value: Any) -> str:
    return "?" if value is None else f"{value:.4g}"


__all__ = ["GateRunner", "merged", "PASSED", "FAILED", "UNDECIDED"]
