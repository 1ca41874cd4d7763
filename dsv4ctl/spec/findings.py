"""A finding: one thing wrong (or risky) in a spec, and where it was written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" or "warning"
    path: str  # dotted field path, e.g. "sampling.max_tokens"
    message: str
    why: str = ""
    location: Location | None = None

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        why = f" ({self.why})" if self.why else ""
        return f"{where}{self.severity}: {self.path}: {self.message}{why}"

    def to_json(self) -> dict[str, Any]:
        loc = self.location
        return {"severity": self.severity, "path": self.path, "message": self.message, "why": self.why,
                "file": loc.file if loc else None, "line": loc.line if loc else None,
                "column": loc.column if loc else None}
