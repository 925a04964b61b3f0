"""The packages of gymflow form layers: each imports only packages below it, and no import cycle
joins two of them. Every import statement counts, including those inside functions and under
TYPE_CHECKING: a deferred import hides an edge from the interpreter, not from a reader."""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gymflow"

#: The packages and top-level modules of gymflow, lowest first. A unit may import units of lower
#: layers, and units of its own layer as long as no cycle results. A new package gets a layer
#: here before it lands.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "core config bounded_yaml processes progress errors registry user_folders present written",
        "models",
        "verifiers",
        "verifier_identity",
        "store",
        "environments",
        "harness",
        "simulated",
        "rollouts",
        "analysis",
        "reports history data interop study reverify recheck task_source",
        "tasks",
        "flows",
        "cli",
    )
)

#: Known edges that break the layers, each owned by a branch that removes it; (importing file
#: under src/gymflow, imported module). An entry no longer needed fails the test: delete it.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Import:
    file: str  # under src/gymflow
    line: int
    module: str  # the imported module, absolute
    source: str  # the importing unit
    target: str  # the imported unit

    def __str__(self) -> str:
        return f"src/gymflow/{self.file}:{self.line} imports {self.module}"


def unit_of(module: str) -> str | None:
    """gymflow.x.y -> x; None for the package root and for modules outside gymflow."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "gymflow" else None


def imported_modules(node: ast.AST, package: str, root: Path) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module == "gymflow":  # `from gymflow import progress` imports the module gymflow.progress
        exports = root_exports(root)  # `from gymflow import Task` imports what the root exports
        return [
            f"gymflow.{alias.name}"
            if (root / f"{alias.name}.py").exists() or (root / alias.name).is_dir()
            else exports[alias.name]
            for alias in node.names
            if (root / f"{alias.name}.py").exists()
            or (root / alias.name).is_dir()
            or alias.name in exports
        ]
    return [module]


def root_exports(root: Path) -> dict[str, str]:
    """The author API of the package root (`_EXPORTS`, name -> (module, attribute)), loaded on
    first use by its `__getattr__`: an import of one of those names is an edge to its module."""
    for node in ast.parse((root / "__init__.py").read_text()).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                return {name: module for name, (module, _) in ast.literal_eval(node.value).items()}
    return {}


def cross_unit_imports(root: Path) -> list[Import]:
    """Every import in the package at `root` from one unit into another."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        module = ".".join(("gymflow", *rel.with_suffix("").parts)).removesuffix(".__init__")
        source = unit_of(module)
        if source is None:
            continue
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target_module in imported_modules(node, package, root):
                target = unit_of(target_module)
                if target is not None and target != source:
                    found.append(Import(rel.as_posix(), node.lineno, target_module, source, target))
    return found


def layer_of(unit: str, layers: tuple[frozenset[str], ...]) -> int | None:
    return next((i for i, layer in enumerate(layers) if unit in layer), None)


def upward_imports(imports: list[Import], layers: tuple[frozenset[str], ...]) -> list[str]:
    problems = []
    for imp in imports:
        low, high = layer_of(imp.source, layers), layer_of(imp.target, layers)
        if low is not None and high is not None and high > low:
            problems.append(
                f"{imp}: {imp.source} (layer {low}) may not import {imp.target} (layer {high})"
            )
    return problems


def cycles(imports: list[Import]) -> list[str]:
    """One shortest cycle per strongly connected group of units, with the imports forming it."""
    graph: dict[str, set[str]] = {}
    sites: dict[tuple[str, str], list[Import]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
        sites.setdefault((imp.source, imp.target), []).append(imp)
    problems = []
    for group in _strongly_connected(graph):
        start = min(group)
        path = _shortest_cycle(graph, start, group)
        lines = [f"import cycle among {', '.join(sorted(group))}, e.g. {' -> '.join(path)}:"]
        for edge in pairwise(path):
            lines += [f"    {imp}" for imp in sites[edge]]
        problems.append("\n".join(lines))
    return problems


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm; only groups of more than one unit (no unit imports itself here)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _shortest_cycle(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """Breadth first from `start` to the first unit that imports `start` back."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.get(v, set()) & group):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is in a cycle but none was found")


def _checked_imports() -> list[Import]:
    return [imp for imp in cross_unit_imports(SRC) if (imp.file, imp.module) not in ALLOWED]


def test_every_unit_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in SRC.iterdir()}
    units = {u for u in units if (SRC / u).is_dir() or (SRC / f"{u}.py").exists()}
    undeclared = sorted(
        u for u in units - {"__init__", "__pycache__"} if layer_of(u, LAYERS) is None
    )
    assert not undeclared, f"give these gymflow units a layer in tests/test_layers.py: {undeclared}"


def test_no_package_imports_a_layer_above_it():
    problems = upward_imports(_checked_imports(), LAYERS)
    assert not problems, "imports against the layers:\n" + "\n".join(problems)


def test_no_import_cycle_between_packages():
    problems = cycles(_checked_imports())
    assert not problems, "\n".join(problems)


def test_every_allowance_is_still_needed():
    present = {(imp.file, imp.module) for imp in cross_unit_imports(SRC)}
    stale = sorted(
        f"{file} -> {module} ({ALLOWED[file, module]})" for file, module in ALLOWED.keys() - present
    )
    assert not stale, f"these edges are gone; delete them from ALLOWED: {stale}"


def test_the_checks_find_a_cycle_and_an_upward_import(tmp_path):
    """The checks above on a small package: `low` imports `high` inside a function."""
    root = tmp_path / "gymflow"
    (root / "low").mkdir(parents=True)
    (root / "high").mkdir()
    (root / "__init__.py").write_text('_EXPORTS = {"Thing": ("gymflow.high.b", "Thing")}\n')
    (root / "low" / "__init__.py").write_text("")
    (root / "high" / "__init__.py").write_text("from gymflow import low\n")
    (root / "low" / "a.py").write_text("def f():\n    from ..high import b\n")
    (root / "low" / "c.py").write_text("from gymflow import Thing\n")  # through the root's API
    imports = cross_unit_imports(root)
    layers = (frozenset({"low"}), frozenset({"high"}))
    assert upward_imports(imports, layers) == [
        "src/gymflow/low/a.py:2 imports gymflow.high: low (layer 0) may not import high (layer 1)",
        "src/gymflow/low/c.py:1 imports gymflow.high.b: low (layer 0) may not import high "
        "(layer 1)",
    ]
    assert cycles(imports) == [
        "import cycle among high, low, e.g. high -> low -> high:\n"
        "    src/gymflow/high/__init__.py:1 imports gymflow.low\n"
        "    src/gymflow/low/a.py:2 imports gymflow.high\n"
        "    src/gymflow/low/c.py:1 imports gymflow.high.b"
    ]
