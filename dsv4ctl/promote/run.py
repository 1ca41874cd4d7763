"""`promote`: a change to the stable set runs the gates in order (numerics, e2e, throughput) against the stable set
as baseline, each as a campaign of real jobs, stops at the first that does not pass, and writes the stable file
only when all three pass. State lives in the store (m012_promotions): killed anywhere, the same command resumes
where it stopped (a campaign recorded but not submitted is resumed, runs in flight are waited for, nothing is
submitted twice). A finished promotion run again prints its result without a job; one that could not decide is
taken up again at the gate that could not run (its lost runs resubmitted: the account is fixed, say).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from . import store as promo_store
from ..store.records import held
from .gates import FAILED, GATE_ORDER, PASSED, UNDECIDED, Gate, GateError, GateResult
from .stable import StableSet, changed_switches, effective, switch_diff, write_stable
from ..errors import ExitCode, UsageError
from ..store import Store

PROMOTED, REFUSED = "promoted", "refused"
DECISION_EXIT = {PROMOTED: int(ExitCode.OK), REFUSED: int(ExitCode.FAILED), UNDECIDED: int(ExitCode.INCONCLUSIVE)}


class PromotionBusy(UsageError):
    """Another process is running this promotion now."""


@dataclass
class Prepared:
    """A promotion before it runs: the change, the stable set it starts from, and what each gate will cost."""

    kind: str  # promote | demote
    changes: dict[str, str | None]
    stable: StableSet
    baseline: dict[str, str]
    candidate: dict[str, str]
    plan: list[dict[str, Any]] = field(default_factory=list)

    @property
    def diff(self) -> list[dict[str, Any]]:
        return switch_diff(self.baseline, self.candidate)


def parse_changes(items: list[str]) -> dict[str, str]:
    """`DSV4_X=1 DSV4_Y=emulation` -> {name: normalised value}; a name the registry does not know is refused."""
    from .stable import StableError, parse_switches

    raw: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{item!r}: give SWITCH=VALUE (DSV4_MOE_Q1_PREPARE=1)")
        if name in raw:
            raise UsageError(f"{name} is given twice")
        raw[name] = value
    try:
        return parse_switches(raw, "promote")
    except StableError as exc:
        raise UsageError(str(exc).removeprefix("promote: switches.")) from None


def prepare(stable: StableSet, kind: str, changes: dict[str, str | None]) -> Prepared:
    """Check the change and the gates; nothing recorded yet."""
    missing = [g for g in GATE_ORDER if g not in stable.gates]
    if missing:
        raise GateError(f"{stable.path}: gates.{missing[0]} is not declared: a promotion runs numerics, e2e and "
                        "throughput (docs/promotion.md)")
    candidate = changed_switches(stable.switches, changes)
    before, after = effective(stable.switches), effective(candidate)
    if before == after:
        names = ", ".join(changes)
        raise UsageError(f"{names}: the stable set has this already ({', '.join(f'{n}={before.get(n)}' for n in changes)})"
                         ": nothing to promote")
    prepared = Prepared(kind, changes, stable, dict(stable.switches), candidate)
    prepared.plan = [_gate_plan(stable.gates[g]) for g in GATE_ORDER]
    return prepared


def demotion(stable: StableSet, name: str) -> dict[str, str | None]:
    """Taking a value back out: a flag goes back to 0, any other switch leaves the file (its registry default)."""
    from ..spec import switches as registry

    if name not in stable.switches:
        raise UsageError(f"{name} is not in the stable set {stable.path} ({', '.join(stable.switches)})")
    known = registry.BY_NAME[name]
    return {name: "0"} if known.kind == "flag" else {name: None}


def _gate_plan(gate: Gate) -> dict[str, Any]:
    from ..bisect.changes import slurm_hours
    from ..spec.load import select_point

    if gate.command:
        return {"gate": gate.name, "what": f"`{gate.command}` here", "jobs": 0, "node_hours": 0.0}
    spec = select_point(gate.spec, None)
    jobs = gate.repeats * (2 if gate.name == "throughput" else 1)
    hours = slurm_hours(spec.slurm.time)
    what = f"{gate.spec.name} x {gate.repeats}"
    if gate.name == "e2e":
        what += f", at most {gate.max_failure_rate:g} failing (Wilson 95% upper bound)"
    elif gate.name == "throughput":
        what = (f"{gate.spec.name}: {gate.repeats} interleaved pairs, {gate.metric}, {gate.require} by "
                f"{gate.factor:g}x")
    return {"gate": gate.name, "what": what, "jobs": jobs,
            "node_hours": None if hours is None else jobs * hours * spec.slurm.nodes}


@dataclass
class Settings:
    backend: str
    runs_root: str
    commit: bool = False


@contextmanager
def holding(store: Store, promotion_id: int) -> Iterator[None]:
    """One process runs a promotion at a time (an flock beside the database, released however it ends)."""
    path = store.path.with_name(f"{store.path.name}.promote{promotion_id}.lock")
    busy = lambda holder: PromotionBusy(  # noqa: E731 - the message, read where the lock is taken
        f"promotion {promotion_id} is being run by {holder}: wait for it, then run the same command again for its "
        "result")
    with held(path, busy):
        yield


def execute(store: Store, prepared: Prepared, settings: Settings, command: str,
            on_progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Run (or resume, or read back) the promotion of `prepared`; its result as plain data."""
    from .gate_runs import GateRunner

    key = promo_store.inputs_key(prepared.kind, prepared.changes, prepared.stable.sha, settings.backend)
    promotion_id, _ = promo_store.find_or_create(store, key, {
        "kind": prepared.kind, "command": command, "backend": settings.backend,
        "stable_path": str(prepared.stable.path.resolve()), "stable_sha": prepared.stable.sha,
        "changes_json": json.dumps(prepared.changes), "baseline_json": json.dumps(prepared.baseline),
        "settings_json": json.dumps({"runs_root": settings.runs_root,
                                     "gates": [prepared.stable.gates[g].to_json() for g in GATE_ORDER]})})
    with holding(store, promotion_id):
        row = promo_store.load(store, promotion_id)
        if row["state"] == promo_store.DONE and row["decision"] != UNDECIDED:
            return result_of(store, promotion_id)
        retry = row["state"] == promo_store.DONE  # it could not decide: take it up at that gate
        if retry:
            promo_store.reopen(store, promotion_id)
        runner = GateRunner(store, promotion_id, prepared, settings, on_progress, retry=retry)
        results: list[GateResult | dict] = []
        for position, name in enumerate(GATE_ORDER):
            done = promo_store.gate_result(store, promotion_id, name)
            if done and done["outcome"] != UNDECIDED:
                results.append(done)
            else:
                result = runner.run(prepared.stable.gates[name]).to_json()
                promo_store.record_gate(store, promotion_id, position, result)
                results.append(result)
            if results[-1]["outcome"] != PASSED:
                break
        _decide(store, promotion_id, prepared, settings, results)
    return result_of(store, promotion_id)


def _decide(store: Store, promotion_id: int, prepared: Prepared, settings: Settings, results: list[dict]) -> None:
    last = results[-1]
    if last["outcome"] == PASSED and len(results) == len(GATE_ORDER):
        provenance = {**prepared.stable.provenance}
        for name in prepared.changes:
            provenance[name] = _provenance_entry(promotion_id, prepared.kind, results)
        write_stable(prepared.stable, prepared.candidate, provenance)
        sha = _commit(prepared, promotion_id) if settings.commit else None
        reason = "all three gates passed: " + "; ".join(f"{r['gate']}: {r['reason']}" for r in results)
        promo_store.finish(store, promotion_id, PROMOTED, reason, prepared.diff, sha)
        return
    decision = REFUSED if last["outcome"] == FAILED else UNDECIDED
    reason = f"{last['gate']}: {last['reason']}"
    promo_store.finish(store, promotion_id, decision, reason, prepared.diff)


def _provenance_entry(promotion_id: int, kind: str, results: list[dict]) -> dict[str, Any]:
    from .. import external
    from ..paths import project_root

    runs = sorted({r for g in results for r in g["runs"]})
    figures = {g["gate"]: g["figures"].get("summary", g["outcome"]) for g in results}
    return {"promotion": promotion_id, "decision": "promoted" if kind == "promote" else "demoted",
            "date": date.today().isoformat(), "commit": external.git_sha(project_root()),
            "runs": runs[:500], "figures": figures}


def _commit(prepared: Prepared, promotion_id: int) -> str | None:
    """--commit: the new stable file as one commit of the repository it lives in; the sha, or None (said why)."""
    from .. import external

    path = prepared.stable.path.resolve()
    words = ", ".join(f"{d['name']}={d['after'] if d['after'] is not None else '(default)'}" for d in prepared.diff)
    message = f"stable: {prepared.kind} {words} (promotion {promotion_id})"
    added = external.run(["git", "add", "--", path.name], cwd=path.parent, timeout=30)
    done = added.ok and external.run(["git", "commit", "-m", message, "--", path.name], cwd=path.parent,
                                     timeout=60).ok
    if not done:
        return None
    head = external.run(["git", "rev-parse", "HEAD"], cwd=path.parent, timeout=10)
    return head.stdout.strip() if head.ok else None


def result_of(store: Store, promotion_id: int) -> dict[str, Any]:
    row = promo_store.load(store, promotion_id)
    return {"promotion": promotion_id, "kind": row["kind"], "changes": row["changes"], "state": row["state"],
            "decision": row["decision"], "reason": row["reason"], "stable_path": row["stable_path"],
            "baseline": row["baseline"], "diff": row["diff"] or [], "commit": row["commit_sha"],
            "written": row["decision"] == PROMOTED, "gates": row["gates"],
            "exit_code": DECISION_EXIT.get(row["decision"], int(ExitCode.FAILED))}
