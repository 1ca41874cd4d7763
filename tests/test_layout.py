"""The house by capability (issue 22), checked from the source: no import circle in dsv4ctl/ or runtime/dsv4rt/,
layers that go one way, a small package root, no module past 500 lines, and no mode-name comparison outside a
mode's own package. Every import counts, also one inside a function (a lazy import still ties two modules) and
one under `if TYPE_CHECKING:` (a type still ties two modules' designs)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lower layers may not import these (commands -> capabilities -> store/scheduler/spec -> judge).
CAPABILITIES = ("campaign", "analysis", "bisect", "report", "modes", "commands", "profile", "promote", "cli")
LOWER = ("store", "scheduler", "spec", "judge")
# A capability's spec half sits at the spec layer: the spec may import these modules (pydantic sections, rules).
SPEC_HALVES = re.compile(r"^dsv4ctl\.(modes\.\w+\.spec_rules|profile\.section|promote\.spec_layer)$")
MODE_NAMES = ("offline", "serve", "align")


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class _Imports(ast.NodeVisitor):
    def __init__(self, name: str, is_package: bool, known: set[str]) -> None:
        self.name, self.is_package, self.known, self.found = name, is_package, known, set()

    def _add(self, target: str) -> None:
        while target and target not in self.known:
            target = target.rpartition(".")[0]
        if target and target != self.name:
            self.found.add(target)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = node.module or ""
        if node.level:
            base = self.name.split(".") if self.is_package else self.name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            full = f"{source}.{alias.name}"
            self._add(full if full in self.known else source)


def import_graph(base: Path, package: str) -> dict[str, set[str]]:
    files = {_module_name(p, base): p for p in (base / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        visitor = _Imports(name, path.name == "__init__.py", set(files))
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        graph[name] = visitor.found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("base, package", [(ROOT, "dsv4ctl"), (ROOT / "runtime", "dsv4rt")])
def test_no_import_circle(base, package):
    assert circles(import_graph(base, package)) == []


def test_layers_go_one_way():
    graph = import_graph(ROOT, "dsv4ctl")
    upward = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                    if module.split(".")[1:2] and module.split(".")[1] in LOWER
                    and target.split(".")[1:2] and target.split(".")[1] in CAPABILITIES
                    and not (module.startswith("dsv4ctl.spec.") and SPEC_HALVES.match(target)))
    assert upward == []
    judge_outside = sorted(f"{m} -> {t}" for m, ts in graph.items() if m.startswith("dsv4ctl.judge")
                           for t in ts if not t.startswith("dsv4ctl.judge") and t != "dsv4ctl.errors")
    assert judge_outside == []


def test_a_small_package_root_and_no_module_past_500_lines():
    root_modules = sorted(p.name for p in (ROOT / "dsv4ctl").glob("*.py"))
    assert len(root_modules) <= 12, root_modules
    long = sorted(f"{p.relative_to(ROOT)}: {n}" for p in [*(ROOT / "dsv4ctl").rglob("*.py"),
                                                           *(ROOT / "runtime").rglob("*.py")]
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500)
    assert long == []


def _compares_a_mode_name(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    values = [node.left, *node.comparators]
    for value in values:
        if isinstance(value, ast.Constant) and value.value in MODE_NAMES:
            return True
        if isinstance(value, (ast.Tuple, ast.List, ast.Set)) and any(
                isinstance(e, ast.Constant) and e.value in MODE_NAMES for e in value.elts):
            return True
    return False


def test_no_code_outside_a_modes_package_compares_a_mode_name():
    found = []
    for path in [*(ROOT / "dsv4ctl").rglob("*.py"), *(ROOT / "runtime").rglob("*.py")]:
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("dsv4ctl", "modes") and len(rel.parts) > 3:
            continue  # a mode's own package: dsv4ctl/modes/<mode>/...
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _compares_a_mode_name(node):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_the_mode_name_check_sees_a_comparison():
    def first(code: str) -> ast.AST:
        return ast.parse(code).body[0].value

    assert _compares_a_mode_name(first('spec.mode == "serve"'))
    assert _compares_a_mode_name(first('mode in ("align", "offline")'))
    assert not _compares_a_mode_name(first('mode == other'))


def test_every_dsv4ctl_module_the_job_side_imports_exists():
    """Regression (this session): a doc-path rewrite turned runtime/dsv4rt/align.py's import of the capture compare
    into `dsv4ctl.modes.registry.align.compare`, and every align job crashed; only the engine tests saw it."""
    known = set(import_graph(ROOT, "dsv4ctl"))
    missing = []
    for path in (ROOT / "runtime").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            missing += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                        if n and n.split(".")[0] == "dsv4ctl" and n not in known]
    assert missing == []


def test_the_registry_and_the_spec_default_to_the_same_mode_and_judging_a_log_loads_no_spec_models():
    """modes/registry.py keeps its own DEFAULT_MODE so that `verdict --log` does not import pydantic's spec models."""
    import subprocess
    import sys

    from dsv4ctl.modes.registry import DEFAULT_MODE as REGISTRY_DEFAULT
    from dsv4ctl.spec.models import DEFAULT_MODE as SPEC_DEFAULT

    assert REGISTRY_DEFAULT == SPEC_DEFAULT
    code = ("import sys; from dsv4ctl.modes.registry import judge_log; "
            f"judge_log({str(ROOT / 'tests' / 'fixtures' / 'logs' / 'J17.log')!r}); "
            "print('dsv4ctl.spec.models' in sys.modules, 'pydantic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"], done.stdout
