"""Where a spec point's findings are shown, and in which words: pydantic's errors reworded (the value and the bound),
one finding per field of a union, and every finding a matrix value caused located at that value in the user's file,
not in the base file it extends (issue 29 S34, issue 26 m3). Used by specload; no YAML here."""

from __future__ import annotations

from typing import Any

from .findings import Finding, Location

FieldPath = tuple[Any, ...]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def structural_message(err: dict[str, Any]) -> str:
    """pydantic's message, reworded where a user needs the value and the bound (`repeats: 100000000 is above the
    maximum 10000`, not `Input should be less than or equal to 10000`)."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; see README 'Spec reference')"
    if kind == "less_than_equal":
        return f"{_shown(value)} is above the maximum {ctx['le']}"
    if kind == "greater_than_equal":
        return f"{_shown(value)} is below the minimum {ctx['ge']}"
    if kind == "too_long":
        return f"{ctx.get('actual_length')} items is above the maximum {ctx.get('max_length')}"
    if kind == "int_type":
        return f"expected a whole number, got {_shown(value)}"
    if kind == "finite_number":
        return f"expected a finite number, got {_shown(value)}"
    return err["msg"].removeprefix("Value error, ")


def _data_path(loc: FieldPath, data: Any) -> FieldPath:
    """`loc` without the union member tags pydantic appends past a scalar (`load.request_rate.float`,
    `...literal['inf']`): once the data holds a plain value there, what follows names a type, not a field."""
    node = data
    for i, part in enumerate(loc):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif node is not None:
            return loc[:i]
        else:
            return loc
    return loc


def structural_findings(errors: list[dict[str, Any]], data: dict[str, Any]) -> list[tuple[FieldPath, str, str]]:
    """(path, severity, message) per field: the members of a union that all refused one value make one finding
    (`expected a finite number, got nan (or 'inf')`), not one each."""
    merged: dict[FieldPath, list[dict[str, Any]]] = {}
    for err in errors:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "[key]"))))
        merged.setdefault(_data_path(loc, data), []).append(err)
    out = []
    for path, errs in merged.items():
        literals = [e for e in errs if e["type"] == "literal_error"]
        rest = [e for e in errs if e["type"] != "literal_error"] or literals[:1]
        message = structural_message(rest[0])
        if literals and rest[0] is not literals[0]:
            message += " (or " + " or ".join(str((e.get("ctx") or {}).get("expected")) for e in literals) + ")"
        out.append((path, "error", message))
    return out


def matrix_origin(path: FieldPath, message: str, point: dict[str, Any],
                  matrix: dict[str, list[Any]]) -> tuple[str, FieldPath] | None:
    """(the axis, where to locate it) when a point's matrix value made this finding: the finding is at or under the
    axis's field, or on a section holding it and naming the field (a section's own check). An unknown field that
    is the axis itself is the axis's error, located at its key; any other at the value that made the point."""
    for key, value in point.items():
        axis = tuple(key.split("."))
        under = path[:len(axis)] == axis
        naming = axis[:len(path)] == path and axis[-1] in message
        if not (under or naming):
            continue
        if under and path == axis and message.startswith("unknown key"):
            return key, ("matrix", key)
        index = next((i for i, v in enumerate(matrix.get(key) or []) if v is value), None)
        return key, ("matrix", key) if index is None else ("matrix", key, index)
    return None


def point_finding(finding: Finding, path: FieldPath, point: dict[str, Any], matrix: dict[str, list[Any]],
                  locate) -> Finding:
    """The finding located where it was written: at the matrix value (or axis) that made it, else at the field."""
    origin = matrix_origin(path, finding.message, point, matrix) if point else None
    if origin is None:
        return Finding(finding.severity, finding.path, finding.message, finding.why, locate(path))
    key, where = origin
    # the axis's own error names the axis; a section's check that names the axis's field names that field
    name = f"matrix.{key}" if where == ("matrix", key) else finding.path if len(path) >= len(key.split(".")) \
        else key
    location: Location | None = locate(where)
    return Finding(finding.severity, name, finding.message, finding.why, location)
