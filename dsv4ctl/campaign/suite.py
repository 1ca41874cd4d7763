"""Regression suites: a folder of specs submitted as one campaign, and a pass/fail matrix of the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Dsv4Error, SpecInvalid
from ..spec.load import load_spec
from ..store import Store

PLATFORM_NEEDS = {"gfx936": "the DCU cluster (Hygon gfx936)", "rocm": "a ROCm GPU cluster",
                  "cuda": "a CUDA GPU cluster", "cpu": "the CPU engine"}


@dataclass
class SuitePlan:
    runnable: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (case, reason)


def plan_suite(directory: Path, platform: str) -> SuitePlan:
    """Every spec of the folder: the ones for `platform` run; the others are skipped, saying what they need."""
    files = sorted(Path(directory).glob("*.yaml"))
    if not files:
        raise Dsv4Error(f"{directory} holds no *.yaml specs")
    plan = SuitePlan()
    for path in files:
        points = load_spec(path)
        errors = [f for p in points for f in p.errors]
        if errors:
            raise SpecInvalid(errors)
        spec = points[0].spec
        if spec.platform == platform:
            plan.runnable.append(path)
        else:
            plan.skipped.append((path.stem, f"needs {PLATFORM_NEEDS.get(spec.platform, spec.platform)}: "
                                            f"{spec.description or spec.name}"))
    return plan


@dataclass
class CaseResult:
    case: str
    runs: int
    passed: int
    statuses: dict[str, int]
    first_blocker: str | None
    skipped: str | None = None
    perf_checked: int = 0  # passed runs checked against a performance reference (issue 17)
    perf_outside: int = 0  # of those, the ones outside it: shown beside the result, never turning it to FAIL

    @property
    def reference(self) -> str:
        if not self.perf_checked:
            return "-"
        return "ok" if not self.perf_outside else f"{self.perf_outside}/{self.perf_checked} outside"

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.runs > 0 and self.passed == self.runs


def suite_matrix(store: Store, campaign: str, skipped: list[tuple[str, str]]) -> list[CaseResult]:
    from ..analysis.perf import stored_check

    rows = store.runs(campaign=campaign)
    verdicts = store.verdict_summaries([r.id for r in rows])
    cases: dict[str, CaseResult] = {}
    for row in rows:
        case = cases.setdefault(row.experiment, CaseResult(row.experiment, 0, 0, {}, None))
        case.runs += 1
        v = verdicts.get(row.id)
        status = v["status"] if v else ("submit_failed" if row.state == "SUBMIT_FAILED" else "not judged")
        case.statuses[status] = case.statuses.get(status, 0) + 1
        if v and v["passed"]:
            case.passed += 1
            check = stored_check(store, row.id)
            case.perf_checked += check is not None
            case.perf_outside += check is not None and not check["within"]
        elif case.first_blocker is None:
            case.first_blocker = (f"{v['first_blocker_kind']} (run {row.id}, line {v['first_blocker_line']})"
                                  if v and v["first_blocker_kind"] else f"{status} (run {row.id})")
    return list(cases.values()) + [CaseResult(name, 0, 0, {}, None, skipped=reason) for name, reason in skipped]
