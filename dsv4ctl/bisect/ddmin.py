"""Delta debugging: the smallest set of changes that still fails (Zeller & Hildebrandt 2002, "Simplifying and
Isolating Failure-Inducing Input", the ddmin algorithm with its three outcomes: FAIL, PASS, UNRESOLVED).

Pure: the oracle is a function from the subsets of one round to their outcomes, so the probes of a round can go out
together (one campaign) and a test can drive it with a plain function. Subsets are sorted tuples of change indices;
the empty set is the good side and the whole set the bad side, both established by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

FAIL, PASS, UNRESOLVED = "fail", "pass", "unresolved"
OUTCOMES = (FAIL, PASS, UNRESOLVED)

Subset = tuple[int, ...]
# The subsets of one round and what the round is (for the record) -> one outcome per subset, in order.
Oracle = Callable[[list[Subset], str], list[str]]


class Stopped(Exception):
    """The oracle cannot answer any more (its job budget is spent): ddmin returns what it has."""


@dataclass
class DdminResult:
    """The failing subset ddmin ended with; `minimal` once every single removal was tried (1-minimal), False when
    the oracle stopped it first (the subset still fails, it may not be minimal)."""

    culprit: Subset
    minimal: bool
    rounds: list[str] = field(default_factory=list)


def split(config: Subset, n: int) -> list[Subset]:
    """`config` cut into `n` contiguous parts of nearly equal size (the earlier parts one longer)."""
    size, extra = divmod(len(config), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(config[start:end])
        start = end
    return [p for p in parts if p]


def _first_failing(candidates: list[Subset], oracle: Oracle, what: str, rounds: list[str]) -> Subset | None:
    fresh = list(dict.fromkeys(candidates))  # a complement can equal a part (n = 2): ask once
    rounds.append(what)
    outcomes = dict(zip(fresh, oracle(fresh, what)))
    return next((c for c in candidates if outcomes[c] == FAIL), None)


def ddmin(changes: Subset, oracle: Oracle) -> DdminResult:
    """Reduce `changes` (which fail together) to a 1-minimal failing subset: removing any one of its changes does
    not fail. Each round asks every part (then every complement) of the current granularity at once."""
    config, n, rounds = tuple(sorted(changes)), 2, []
    try:
        while len(config) >= 2:
            parts = split(config, n)
            found = _first_failing(parts, oracle, f"{len(parts)} parts of {len(config)}", rounds)
            if found is not None:
                config, n = found, 2
                continue
            if len(parts) > 2:  # with two parts each complement is the other part, asked already
                complements = [tuple(c for c in config if c not in part) for part in parts]
                found = _first_failing(complements, oracle, f"{len(parts)} complements of {len(config)}", rounds)
                if found is not None:
                    config, n = found, max(len(parts) - 1, 2)
                    continue
            if n >= len(config):
                break
            n = min(2 * n, len(config))
    except Stopped:
        return DdminResult(config, minimal=False, rounds=rounds)
    return DdminResult(config, minimal=True, rounds=rounds)


def worst_case_probes(n: int) -> int:
    """An upper bound on the distinct subsets ddmin asks about for `n` changes (Zeller & Hildebrandt: n² + 3n)."""
    return n * n + 3 * n
