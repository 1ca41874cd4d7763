"""Where a spec point's findings are shown, and in which words: pydantic's errors reworded (the value and the bound),
one finding per field of a union, and every finding a matrix value caused located at that value in the user's file,
not in the base file it extends (issue 29 S34, issue 26 m3). Used by specload; no YAML here."""

from __future__ import annotations

from typing import Any

from .findings import Finding, Location

FieldPath = tuple[Any, ...]


SPEC_REFERENCE = "docs/reference/spec.md"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _unwrap(annotation: Any, part: Any) -> list[Any]:
    """The types a value at `part` under a value of `annotation` can have (a field of a model, an item of a
    list, a value of a mapping), Optional/Annotated/unions looked through."""
    import typing

    from pydantic import BaseModel

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _unwrap(args[0], part)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        return [t for arg in args for t in _unwrap(arg, part)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(part)
        return [field.annotation] if field is not None else []
    if origin is list and isinstance(part, int):
        return list(args[:1])
    if origin is dict and isinstance(part, str):
        return list(args[1:2])
    return []


def known_keys(path: FieldPath) -> list[str]:
    """The keys the mapping at `path` takes (`sampling` -> max_tokens, temperature, ...), [] where any key goes."""
    import typing

    from pydantic import BaseModel

    from .models import ExperimentSpec

    types: list[Any] = [ExperimentSpec]
    for part in path:
        types = [t for annotation in types for t in _unwrap(annotation, part)]
    keys: list[str] = []
    for annotation in types:
        for arg in [annotation, *typing.get_args(annotation)]:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                keys += [k for k in arg.model_fields if k not in keys]
    return keys


def unknown_key_message(path: FieldPath) -> str:
    """`unknown key; did you mean 'max_tokens'?`, else the keys the section takes; and where they are written up."""
    import difflib

    keys, key = known_keys(path[:-1]), str(path[-1]) if path else ""
    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if near:
        return f"unknown key; did you mean {near[0]!r}? (see {SPEC_REFERENCE})"
    where = ".".join(str(p) for p in path[:-1]) or "a spec"
    if not keys:
        return f"unknown key (check the spelling; see {SPEC_REFERENCE})"
    shown = ", ".join(keys[:12]) + (", ..." if len(keys) > 12 else "")
    return f"unknown key; {where} takes {shown} (see {SPEC_REFERENCE})"


# pydantic's error types reworded: no message a user reads names a regular expression or pydantic's own words.
_TYPE_WORDS = {"string_type": "text", "float_type": "a number", "float_parsing": "a number", "bool_type":
               "true or false", "bool_parsing": "true or false", "dict_type": "a mapping (key: value lines)",
               "model_type": "a mapping (key: value lines)", "model_attributes_type": "a mapping (key: value lines)",
               "list_type": "a list", "int_type": "a whole number", "int_parsing": "a whole number",
               "finite_number": "a finite number", "string_unicode": "text"}


def _length_message(kind: str, ctx: dict[str, Any]) -> str:
    least, most = ctx.get("min_length"), ctx.get("max_length")
    if kind == "string_too_short":
        return "must not be empty" if least == 1 else f"is shorter than {least} characters"
    if kind == "string_too_long":
        return f"is longer than {most} characters"
    if kind == "too_short":
        return (f"an empty list; give at least {least} item(s)".replace("1 item(s)", "one item")
                if not ctx.get("actual_length")
                else f"{ctx.get('actual_length')} items is below the minimum {least}")
    return f"{ctx.get('actual_length')} items is above the maximum {most}"


def structural_message(err: dict[str, Any], path: FieldPath = ()) -> str:
    """pydantic's message, reworded where a user needs the value and the bound (`repeats: 100000000 is above the
    maximum 10000`, not `Input should be less than or equal to 10000`) and in plain words everywhere else
    (`'2 hours' is not a Slurm time`, not the pattern); an unknown key gets the closest known one."""
    from .models import PATTERN_WORDS

    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return unknown_key_message(path or tuple(err.get("loc") or ()))
    if kind == "less_than_equal":
        return f"{_shown(value)} is above the maximum {_bound(ctx['le'])}"
    if kind == "greater_than_equal":
        return f"{_shown(value)} is below the minimum {_bound(ctx['ge'])}"
    if kind == "less_than":
        return f"{_shown(value)} must be less than {_bound(ctx['lt'])}"
    if kind == "greater_than":
        return f"{_shown(value)} must be greater than {_bound(ctx['gt'])}"
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        return _length_message(kind, ctx)
    if kind == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(ctx.get("pattern"), "has characters this field does not take")
        return f"{_shown(value)} {words}"
    if kind == "missing":
        return "required: this key is missing"
    if kind == "literal_error":
        return f"{_shown(value)} is not one of {ctx.get('expected')}"
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, got {_shown(value)}"
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
        message = structural_message(rest[0], path)
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
