"""Read spec files: YAML with a line for every field, `extends` deep-merged, matrix points expanded.

`load_spec(path)` returns one `LoadedSpec` per matrix point, each with the validated `ExperimentSpec` (or None) and
every finding (structural from pydantic, domain from `rules.py`), located at the file, line and column of the field.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import SpecError
from .findings import Finding, Location
from .spec import ExperimentSpec

FieldPath = tuple[Any, ...]


@dataclass
class Document:
    """Raw spec data (after `extends`) and where each field was written."""

    data: dict[str, Any]
    locations: dict[FieldPath, Location] = field(default_factory=dict)

    def locate(self, path: FieldPath) -> Location | None:
        # The deepest written ancestor: a missing field is reported where its parent is.
        for n in range(len(path), -1, -1):
            loc = self.locations.get(tuple(path[:n]))
            if loc:
                return loc
        return None


@dataclass
class LoadedSpec:
    """One matrix point of a spec file: the validated spec (None if invalid) and its findings."""

    source: Path
    point: dict[str, Any]
    spec: ExperimentSpec | None
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def dotted(path: FieldPath) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


# ---- YAML with locations -------------------------------------------------------------------------------------


def _walk(node: yaml.Node, loader: yaml.SafeLoader, path: FieldPath, file: str,
          locations: dict[FieldPath, Location]) -> Any:
    locations[path] = Location(file, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in out:
                mark = key_node.start_mark
                raise SpecError(f"{file}:{mark.line + 1}:{mark.column + 1}: duplicate key {key!r}")
            out[key] = _walk(value_node, loader, path + (key,), file, locations)
            # A key's own line is more useful than its value's (a nested mapping starts on the next line).
            locations[path + (key,)] = Location(file, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, loader, path + (i,), file, locations) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def parse_yaml(text: str, file: str) -> Document:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError(f"{file}: the spec is empty")
        locations: dict[FieldPath, Location] = {}
        data = _walk(node, loader, (), file, locations)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise SpecError(f"{where}: YAML syntax error: {exc.problem or exc}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError(f"{file}:1:1: a spec must be a mapping of keys (name:, model:, ...)")
    return Document(data, locations)


# ---- extends ---------------------------------------------------------------------------------------------------


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _replaced_in(path: FieldPath, data: dict[str, Any]) -> bool:
    """Whether `data` replaces the value at `path` (or an ancestor) wholesale rather than merging into it."""
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
        if not isinstance(node, dict):
            return True
    return False


def read_document(path: Path, _chain: tuple[Path, ...] = ()) -> Document:
    path = Path(path)
    resolved = path.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(p) for p in _chain + (resolved,))
        raise SpecError(f"{path}: `extends` cycle: {cycle}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the spec: {exc}") from None
    doc = parse_yaml(text, str(path))
    parent = doc.data.pop("extends", None)
    if parent is None:
        return doc
    if not isinstance(parent, str):
        raise SpecError(f"{doc.locate(('extends',))}: `extends` must be a file path")
    base = read_document(path.parent / parent, _chain + (resolved,))
    own = {k: v for k, v in doc.locations.items() if k != ("extends",)}
    inherited = {k: v for k, v in base.locations.items() if k == () or not _replaced_in(k, doc.data)}
    return Document(_deep_merge(base.data, doc.data), {**inherited, **own})


# ---- matrix and validation ---------------------------------------------------------------------------------------


def _set_path(data: dict[str, Any], dotted_key: str, value: Any) -> None:
    parts = dotted_key.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise KeyError(dotted_key)
    node[parts[-1]] = value


def matrix_points(matrix: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of the matrix axes, in the order written (first axis slowest)."""
    if not matrix:
        return [{}]
    keys = list(matrix)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(matrix[k] for k in keys))]


def point_label(point: dict[str, Any]) -> str:
    return ".".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in point.items())


def _structural_findings(exc: ValidationError, doc: Document) -> list[Finding]:
    findings = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "[key]"))))
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key (check the spelling; see README 'Spec reference')"
        findings.append(Finding("error", dotted(loc), message, location=doc.locate(loc)))
    return findings


PATH_FIELDS: tuple[FieldPath, ...] = (("model", "path"), ("model", "tokenizer"), ("environment", "venv"),
                                     ("environment", "python"), ("environment", "runtime_dir"))
LIST_PATH_FIELDS: tuple[FieldPath, ...] = (("environment", "pythonpath"), ("environment", "ld_library_path"))


def _resolve(value: Any, where: Location | None) -> Any:
    """`./x` and `../x` are relative to the spec file that wrote them; every other path is the node's business."""
    if isinstance(value, str) and value.startswith(("./", "../")) and where is not None:
        return str((Path(where.file).parent / value).resolve())
    return value


def resolve_relative_paths(doc: Document) -> None:
    for path in PATH_FIELDS:
        section = doc.data.get(path[0])
        if isinstance(section, dict) and path[1] in section:
            section[path[1]] = _resolve(section[path[1]], doc.locate(path))
    for path in LIST_PATH_FIELDS:
        section = doc.data.get(path[0])
        if isinstance(section, dict) and isinstance(section.get(path[1]), list):
            section[path[1]] = [_resolve(v, doc.locate(path + (i,))) for i, v in enumerate(section[path[1]])]


def validate_document(doc: Document, source: Path) -> list[LoadedSpec]:
    from .rules import check_spec  # imported here: rules import the spec models, keep the graph one-way

    resolve_relative_paths(doc)
    matrix = doc.data.get("matrix") or {}
    if not isinstance(matrix, dict) or not all(isinstance(v, list) and v for v in matrix.values()):
        loc = doc.locate(("matrix",))
        return [LoadedSpec(source, {}, None, [Finding("error", "matrix", "each axis must be a non-empty list",
                                                        location=loc)])]
    results = []
    for point in matrix_points(matrix):
        data = copy.deepcopy(doc.data)
        findings: list[Finding] = []
        for key, value in point.items():
            try:
                _set_path(data, key, value)
            except KeyError:
                findings.append(Finding("error", f"matrix.{key}", "axis is not a field path of the spec",
                                        location=doc.locate(("matrix", key))))
        if point and not findings:
            data["name"] = f"{data.get('name', '')}.{point_label(point)}"
        spec = None
        try:
            spec = ExperimentSpec.model_validate(data)
        except ValidationError as exc:
            findings.extend(_structural_findings(exc, doc))
        if spec is not None:
            for finding in check_spec(spec):
                path = tuple(int(p) if p.isdigit() else p for p in finding.path.split("."))
                findings.append(Finding(finding.severity, finding.path, finding.message, finding.why,
                                        doc.locate(path)))
        results.append(LoadedSpec(source, point, spec if not any(f.severity == "error" for f in findings) else None,
                                  findings))
    return results


def load_spec(path: Path | str) -> list[LoadedSpec]:
    """Read, merge and validate a spec file; one `LoadedSpec` per matrix point. Raises SpecError if unreadable."""
    path = Path(path)
    return validate_document(read_document(path), path)


def select_point(path: Path, index: int | None) -> ExperimentSpec:
    """The one valid spec of a file's matrix point `index` (required when the file has several points)."""
    from .errors import SpecInvalid

    points = load_spec(path)
    if index is None:
        if len(points) > 1:
            raise SpecError(f"{path} has {len(points)} matrix points: pass --point N (see `dsv4ctl expand {path}`)")
        index = 0
    if not 0 <= index < len(points):
        raise SpecError(f"{path}: no matrix point {index} (it has {len(points)})")
    chosen = points[index]
    if chosen.spec is None:
        raise SpecInvalid(chosen.findings)
    return chosen.spec
