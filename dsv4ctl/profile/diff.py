"""The A/B of profiles: per category and per module, the candidate's kernel time against the baseline's over
repeats, with compare's statistics (median, the order-statistic interval of the median, Mann-Whitney U), a gate
that needs a significant test AND a relative AND an absolute change, and what explains the end-to-end delta:
the fewest categories, largest first, whose changes add up to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .breakdown import Breakdown

TOTAL = "(total)"


class MixedProfiles(UsageError):
    """Two sides whose profiles cannot be compared (other category rules, a CPU side against a GPU side)."""


@dataclass(frozen=True)
class Gate:
    alpha: float = 0.05
    min_relative: float = 0.05  # 5%
    min_us: float = 50.0  # per profiled window, per rank


@dataclass
class DiffRow:
    name: str
    kind: str  # total, category or module
    base: list[float]
    cand: list[float]
    base_us: float
    cand_us: float
    p: float | None
    base_ci: tuple[float, float] | None
    cand_ci: tuple[float, float] | None
    changed: bool
    why: str

    @property
    def delta_us(self) -> float:
        return self.cand_us - self.base_us

    @property
    def relative(self) -> float | None:
        return self.delta_us / self.base_us if self.base_us else None

    def to_json(self) -> dict[str, Any]:
        from ..analysis.stats import finite_or_null

        return finite_or_null({
            "name": self.name, "kind": self.kind, "base_us": round(self.base_us, 3), "cand_us": round(self.cand_us, 3),
            "delta_us": round(self.delta_us, 3),
            "relative": None if self.relative is None else round(self.relative, 6), "p": self.p,
            "base_ci": self.base_ci, "cand_ci": self.cand_ci, "n_base": len(self.base), "n_cand": len(self.cand),
            "changed": self.changed, "why": self.why}, intervals_whole=True)


@dataclass
class ProfileDiff:
    base_label: str
    cand_label: str
    rows: list[DiffRow]
    explains: list[str]
    explained_share: float | None
    gate: Gate
    rules_hash: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.base_label, "candidate": self.cand_label, "rules_hash": self.rules_hash,
                "gate": {"alpha": self.gate.alpha, "min_relative": self.gate.min_relative,
                         "min_us": self.gate.min_us},
                "rows": [r.to_json() for r in self.rows], "explains": self.explains,
                "explained_share": None if self.explained_share is None else round(self.explained_share, 6),
                "notes": self.notes}


def run_values(profile: list[Breakdown]) -> dict[tuple[str, str], float]:
    """One profiled run's figures: each category's and module's kernel time, the mean over its ranks."""
    values: dict[tuple[str, str], float] = {}
    n = len(profile) or 1
    for b in profile:
        values[("total", TOTAL)] = values.get(("total", TOTAL), 0.0) + b.kernel_us / n
        for name, us in b.categories.items():
            values[("category", name)] = values.get(("category", name), 0.0) + us / n
        for name, us in b.modules.items():
            values[("module", name)] = values.get(("module", name), 0.0) + us / n
    return values


def _check_same(base: list[list[Breakdown]], cand: list[list[Breakdown]]) -> str:
    hashes = {b.rules_hash for side in (base, cand) for run in side for b in run}
    devices = {b.device for side in (base, cand) for run in side for b in run}
    if len(hashes) > 1:
        raise MixedProfiles(f"profiles made under {len(hashes)} different category rules ({', '.join(sorted(hashes))})"
                            ": read the traces again under one set (`dsv4ctl profile RUN --store`)")
    if len(devices) > 1:
        raise MixedProfiles("one side is a CPU-only profile and the other a GPU one: their times are not alike")
    if not all(base) or not all(cand) or not base or not cand:
        raise MixedProfiles("a side without any profile")
    return hashes.pop()


def diff_profiles(base_label: str, base: list[list[Breakdown]], cand_label: str, cand: list[list[Breakdown]],
                  gate: Gate = Gate()) -> ProfileDiff:
    """`base` and `cand`: each side's profiled runs, each run its breakdowns (one per rank)."""
    from ..analysis.stats import mann_whitney_p, min_samples, summarise

    rules_hash = _check_same(base, cand)
    bv, cv = [run_values(r) for r in base], [run_values(r) for r in cand]
    keys = list(dict.fromkeys([k for v in bv + cv for k in v]))
    rows = []
    few = min(len(bv), len(cv)) < min_samples(gate.alpha)
    for kind, name in keys:
        a = [v.get((kind, name), 0.0) for v in bv]
        b = [v.get((kind, name), 0.0) for v in cv]
        if not any(a) and not any(b):
            continue
        sa, sb = summarise(a), summarise(b)
        p = None if few else mann_whitney_p(a, b)
        row = DiffRow(name, kind, a, b, sa.median, sb.median, p, sa.ci, sb.ci, False, "")
        row.changed, row.why = _gate(row, gate, few)
        rows.append(row)
    rows.sort(key=lambda r: ({"total": 0, "category": 1, "module": 2}[r.kind], -abs(r.delta_us)))
    explains, share = _explains(rows, None if few else gate.alpha)
    notes = [f"{len(bv)} and {len(cv)} profiled runs: the test needs >= {min_samples(gate.alpha)} a side; the "
             "differences are shown, none is called a change"] if few else []
    return ProfileDiff(base_label, cand_label, rows, explains, share, gate, rules_hash, notes)


def _gate(row: DiffRow, gate: Gate, few: bool) -> tuple[bool, str]:
    if few:
        return False, "too few runs to test"
    if row.p is None or row.p >= gate.alpha:
        return False, f"p {row.p:.3g} >= {gate.alpha}"
    if abs(row.delta_us) < gate.min_us:
        return False, f"|delta| under {gate.min_us:g} us"
    if row.relative is not None and abs(row.relative) < gate.min_relative:
        return False, f"|change| under {gate.min_relative:.0%}"
    return True, "changed"


def _explains(rows: list[DiffRow], alpha: float | None) -> tuple[list[str], float | None]:
    """The fewest categories, largest change first, that move the same way as the total and add up to it. With
    enough runs to test (`alpha` given) only the categories whose change is significant count: a category that
    moved by noise (p >= alpha) explains nothing, so the list stops short of 100% rather than name every one."""
    total = next((r for r in rows if r.kind == "total"), None)
    if total is None or total.delta_us == 0:
        return [], None
    sign = 1 if total.delta_us > 0 else -1
    moving = sorted((r for r in rows if r.kind == "category" and r.delta_us * sign > 0
                     and (alpha is None or (r.p is not None and r.p < alpha))), key=lambda r: -abs(r.delta_us))
    chosen, covered = [], 0.0
    for r in moving:
        chosen.append(r.name)
        covered += r.delta_us
        if covered * sign >= abs(total.delta_us):
            break
    return chosen, covered / total.delta_us
