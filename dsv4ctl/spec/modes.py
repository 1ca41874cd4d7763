"""The spec half of the modes: for each mode, the rules its specs also meet and the metrics its job records (what
`expect.perf` can name). One line per mode; each mode keeps both in its own package (`modes/<name>/spec_rules.py`,
which imports only the spec's models and findings). The sections a mode owns in a spec are `MODE_SECTIONS` in
spec/models.py (pydantic needs them declared there). The rest of a mode (how its run is judged, stored and drawn)
is the mode registry (modes/registry.py), above the spec."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..modes.align import spec_rules as align
from ..modes.offline import spec_rules as offline
from ..modes.serve import spec_rules as serve
from .findings import Finding


@dataclass(frozen=True)
class ModeSpec:
    name: str
    rules: tuple[Callable[..., Iterator[Finding]], ...]
    metrics: Callable[[], frozenset[str]]


SPEC_MODES: dict[str, ModeSpec] = {
    "offline": ModeSpec("offline", offline.RULES, lambda: offline.METRICS),
    "serve": ModeSpec("serve", serve.SERVE_RULES, serve.metrics),
    "align": ModeSpec("align", align.RULES, lambda: align.METRICS),
}
