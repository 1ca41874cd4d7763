"""Read spec files: YAML with a line for every field, `extends` deep-merged, matrix points expanded.

`load_spec(path)` returns one `LoadedSpec` per matrix point, each with the validated `ExperimentSpec` (or None) and
every finding (structural from pydantic, domain from `rules.py`), located at the file, line and column of the field.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import SpecError
from .findings import Finding, Location
from ..limits import (
    MAX_ALIAS_NODES,
    MAX_EXTENDS_DEPTH,
    MAX_MATRIX_POINTS,
    MAX_RUNS_PER_SPEC,
    MAX_SPEC_BYTES,
    MAX_YAML_DEPTH,
)
from .models import ExperimentSpec
from .wording import point_finding, structural_findings, structural_message  # noqa: F401

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


# ---- YAML with locations, within bounds ------------------------------------------------------------------------


class _Refused(yaml.MarkedYAMLError):
    """YAML that parses but that dsv4ctl will not expand (too deep, too many aliases, recursive)."""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with a composer that refuses nesting deeper than MAX_YAML_DEPTH (PyYAML composes
    recursively: 5000 nested `[` exhaust Python's stack before any limit of ours could apply)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise _Refused(problem=f"nested deeper than {MAX_YAML_DEPTH} levels",
                               problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


@dataclass
class _Expansion:
    """What walking the node graph has cost: an `*alias` shares its anchor's node, so every visit of a node seen
    before is an expansion; a billion-laughs file is refused after MAX_ALIAS_NODES of them, not after 2 GB."""

    file: str
    locations: dict[FieldPath, Location]
    seen: set[int] = field(default_factory=set)
    ancestors: set[int] = field(default_factory=set)
    alias_nodes: int = 0

    def enter(self, node: yaml.Node, path: FieldPath) -> None:
        where = _where(self.file, node.start_mark)
        if id(node) in self.ancestors:
            raise SpecError(f"{where}: recursive alias: an anchor is used inside itself")
        if len(path) > MAX_YAML_DEPTH:
            raise SpecError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels (counting expanded aliases)")
        if id(node) in self.seen:
            self.alias_nodes += 1
            if self.alias_nodes > MAX_ALIAS_NODES:
                raise SpecError(f"{where}: aliases expand to more than {MAX_ALIAS_NODES} nodes; "
                                "write the values out or use `extends`")
        self.seen.add(id(node))


def _where(file: str, mark: yaml.Mark | None) -> str:
    return f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file


def _scalar(node: yaml.Node, loader: yaml.SafeLoader, file: str) -> Any:
    try:
        return loader.construct_object(node, deep=True)
    except (ValueError, OverflowError) as exc:  # 2001-13-45 as a date, an int of 5000 digits
        value = str(node.value)
        shown = value if len(value) <= 40 else value[:37] + "..."
        reason = str(exc).split(";")[0].splitlines()[0]
        raise SpecError(f"{_where(file, node.start_mark)}: cannot read the value {shown!r}: {reason}") from None


def _key(node: yaml.Node, loader: yaml.SafeLoader, file: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        kind = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
        raise SpecError(f"{_where(file, node.start_mark)}: a key must be a plain name, not a {kind}")
    return _scalar(node, loader, file)


def _walk(node: yaml.Node, loader: yaml.SafeLoader, path: FieldPath, cost: _Expansion) -> Any:
    cost.enter(node, path)
    cost.locations[path] = Location(cost.file, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node, loader, cost.file)
    cost.ancestors.add(id(node))
    try:
        if isinstance(node, yaml.MappingNode):
            return _walk_mapping(node, loader, path, cost)
        return [_walk(item, loader, path + (i,), cost) for i, item in enumerate(node.value)]
    finally:
        cost.ancestors.discard(id(node))


def _walk_mapping(node: yaml.MappingNode, loader: yaml.SafeLoader, path: FieldPath, cost: _Expansion) -> dict:
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = _key(key_node, loader, cost.file)
        if key in out:
            raise SpecError(f"{_where(cost.file, key_node.start_mark)}: duplicate key {key!r}")
        out[key] = _walk(value_node, loader, path + (key,), cost)
        # A key's own line is more useful than its value's (a nested mapping starts on the next line).
        cost.locations[path + (key,)] = Location(cost.file, key_node.start_mark.line + 1,
                                                 key_node.start_mark.column + 1)
    return out


def _reader_error(exc: yaml.reader.ReaderError, text: str, file: str) -> SpecError:
    before = text[:exc.position]
    line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
    character = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
    return SpecError(f"{file}:{line}:{column}: the file holds a character YAML does not allow ({character}: a NUL "
                     "or other control character)")


def parse_yaml(text: str, file: str) -> Document:
    try:
        loader = BoundedLoader(text)
    except yaml.reader.ReaderError as exc:  # the reader checks every character up front
        raise _reader_error(exc, text, file) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError(f"{file}: the spec is empty")
        locations: dict[FieldPath, Location] = {}
        data = _walk(node, loader, (), _Expansion(file, locations))
    except _Refused as exc:
        raise SpecError(f"{_where(file, exc.problem_mark)}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SpecError(f"{_where(file, mark)}: YAML syntax error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{file}: YAML error: {str(exc).splitlines()[0]}") from None
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


def read_spec_text(path: Path) -> str:
    """The text of a spec file, refused past MAX_SPEC_BYTES without reading further (`validate /dev/zero`)."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES // 2**20} MiB; is it really a spec?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}): is it really a spec?") from None


def read_document(path: Path, _chain: tuple[Path, ...] = ()) -> Document:
    path = Path(path)
    resolved = path.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(p) for p in _chain + (resolved,))
        raise SpecError(f"{path}: `extends` cycle: {cycle}")
    if len(_chain) >= MAX_EXTENDS_DEPTH:
        raise SpecError(f"{path}: `extends` goes more than {MAX_EXTENDS_DEPTH} files deep")
    doc = parse_yaml(read_spec_text(path), str(path))
    parent = doc.data.pop("extends", None)
    if parent is None:
        return doc
    if not isinstance(parent, str) or not parent or "\x00" in parent:
        raise SpecError(f"{doc.locate(('extends',))}: `extends` must be a file path")
    if parent != "stable" and not (path.parent / parent).exists():  # the base is missing, not this file (26 m5)
        raise SpecError(f"{doc.locate(('extends',))}: base {parent} not found (looked for {path.parent / parent})")
    if parent == "stable":  # the project's stable switch set (docs/promotion.md); ./stable names a file
        from ..promote.spec_layer import stable_spec_data

        base = Document(stable_spec_data(path))
    else:
        base = read_document(path.parent / parent, _chain + (resolved,))
    own = {k: v for k, v in doc.locations.items() if k != ("extends",)}
    inherited = {k: v for k, v in base.locations.items() if k == () or not _replaced_in(k, doc.data)}
    return Document(_deep_merge(base.data, doc.data), {**inherited, **own})


# ---- matrix and validation ---------------------------------------------------------------------------------------


def _set_path(data: dict[str, Any], dotted_key: Any, value: Any) -> None:
    if not isinstance(dotted_key, str):
        raise KeyError(dotted_key)
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


PATH_FIELDS: tuple[FieldPath, ...] = (("model", "path"), ("model", "tokenizer"), ("environment", "venv"),
                                     ("environment", "python"), ("environment", "runtime_dir"), ("load", "path"),
                                     ("align", "perplexity_file"))
LIST_PATH_FIELDS: tuple[FieldPath, ...] = (("environment", "pythonpath"), ("environment", "ld_library_path"))


def _resolve(value: Any, where: Location | None) -> Any:
    """`./x` and `../x` are relative to the spec file that wrote them; every other path is the node's business."""
    # A NUL cannot be in a path (validation refuses the value, with its location, right after).
    if isinstance(value, str) and value.startswith(("./", "../")) and "\x00" not in value and where is not None:
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


def apply_site_defaults(doc: Document) -> None:
    """What the project config (dsv4ctl.toml) sets and the spec does not: partition, account, qos, venv, modules,
    and a relative model path taken under the site's model root."""
    from ..config import load_config, site_defaults

    config = load_config()
    for section, values in site_defaults(config).items():
        target = doc.data.get(section)
        if target is None:
            target = doc.data[section] = {}
        if not isinstance(target, dict):
            continue  # validation reports the bad section with its location
        for key, value in values.items():
            if key == "extra" and isinstance(target.get("extra", {}), dict):
                target["extra"] = {**value, **target.get("extra", {})}
            else:
                target.setdefault(key, value)
    model = doc.data.get("model")
    if config.model_root and isinstance(model, dict) and isinstance(model.get("path"), str):
        path = model["path"]
        if path and not path.startswith(("/", "./", "../", "~")):
            model["path"] = f"{config.model_root.rstrip('/')}/{path}"


def validate_document(doc: Document, source: Path) -> list[LoadedSpec]:
    apply_site_defaults(doc)
    resolve_relative_paths(doc)
    matrix = doc.data.get("matrix") or {}
    if not isinstance(matrix, dict) or not all(isinstance(v, list) and v for v in matrix.values()):
        loc = doc.locate(("matrix",))
        return [LoadedSpec(source, {}, None, [Finding("error", "matrix", "each axis must be a non-empty list",
                                                        location=loc)])]
    size = math.prod(len(axis) for axis in matrix.values())
    if size > MAX_MATRIX_POINTS:  # counted before a single point is built
        return [LoadedSpec(source, {}, None, [Finding("error", "matrix", f"{size} points is above the maximum "
                                                     f"{MAX_MATRIX_POINTS}", location=doc.locate(("matrix",)))])]
    results = [_validate_point(doc, source, point) for point in matrix_points(matrix)]
    _bound_runs(results, doc)
    return results


def _bound_runs(results: list[LoadedSpec], doc: Document) -> None:
    """Matrix points x repeats of one file stay within MAX_RUNS_PER_SPEC (each point alone is already bounded)."""
    runs = sum(r.spec.repeats for r in results if r.spec is not None)
    if runs <= MAX_RUNS_PER_SPEC:
        return
    finding = Finding("error", "repeats", f"{len(results)} point(s) x repeats make {runs} runs, above the maximum "
                                          f"{MAX_RUNS_PER_SPEC}", location=doc.locate(("repeats",)))
    for result in results:
        result.findings.append(finding)
        result.spec = None


def _validate_point(doc: Document, source: Path, point: dict[str, Any]) -> LoadedSpec:
    from .rules import check_spec  # imported here: rules import the spec models, keep the graph one-way

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
    found: list[tuple[FieldPath, Finding]] = []
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        found = [(path, Finding(severity, dotted(path), message))
                 for path, severity, message in structural_findings(exc.errors(include_url=False), data)]
    if spec is not None:
        found = [(tuple(int(p) if p.isdigit() else p for p in f.path.split(".")), f)
                 for f in check_spec(spec)]
    matrix = doc.data.get("matrix") or {}
    findings += [point_finding(f, path, point, matrix, doc.locate) for path, f in found]
    return LoadedSpec(source, point, spec if not any(f.severity == "error" for f in findings) else None,
                      findings)


def load_spec(path: Path | str) -> list[LoadedSpec]:
    """Read, merge and validate a spec file; one `LoadedSpec` per matrix point. Raises SpecError if unreadable."""
    path = Path(path)
    return validate_document(read_document(path), path)


@dataclass
class SpecFile:
    """One file of `validate a.yaml b.yaml`: its matrix points, or why it could not be read at all."""

    source: Path
    points: list[LoadedSpec]
    unreadable: str | None = None

    @property
    def failed(self) -> bool:
        return self.unreadable is not None or any(p.errors for p in self.points)


def check_files(paths: list[Path]) -> list[SpecFile]:
    """Load every file, going on past the ones that cannot be read, so one run reports them all."""
    checked = []
    for path in map(Path, paths):
        try:
            checked.append(SpecFile(path, load_spec(path)))
        except SpecError as exc:
            checked.append(SpecFile(path, [], str(exc)))
    return checked


def select_point(path: Path, index: int | None) -> ExperimentSpec:
    """The one valid spec of a file's matrix point `index` (required when the file has several points)."""
    from ..errors import SpecInvalid

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
