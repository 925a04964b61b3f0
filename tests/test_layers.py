"""The packages of gymflow are the layers. Each top-level package's `__init__` declares its tier
(`__tier__`), what it holds and what other packages may use (`__all__`), read by
`gymflow.core.layout`; this test holds no list of its own. A package imports only packages of its
own tier or lower ones; no import cycle joins two packages, nor two modules of one package; and
an import from another package names the package itself or one of its public names.

Every import statement counts, including those inside functions and under TYPE_CHECKING: a
deferred import hides an edge from the interpreter, not from a reader."""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from gymflow.core.layout import LayoutError, Package, loose_modules, packages

SRC = Path(__file__).resolve().parents[1] / "src" / "gymflow"

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
    if module == "gymflow":  # `from gymflow import Task` imports what the root exports
        exports = root_exports(root)
        return [exports.get(alias.name, f"gymflow.{alias.name}") for alias in node.names]
    folder = _folder(module, root)
    if folder is None:
        return [module]
    # `from gymflow.core import progress` imports the module gymflow.core.progress
    return [
        f"{module}.{alias.name}"
        if (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
        else module
        for alias in node.names
    ]


def _folder(module: str, root: Path) -> Path | None:
    """The folder of a gymflow package `module`; None for a module or anything outside."""
    parts = module.split(".")
    if parts[0] != "gymflow":
        return None
    folder = root.joinpath(*parts[1:])
    return folder if (folder / "__init__.py").exists() else None


def root_exports(root: Path) -> dict[str, str]:
    """The author API of the package root (`_EXPORTS`, name -> (module, attribute)), loaded on
    first use by its `__getattr__`: an import of one of those names is an edge to its module."""
    for node in ast.parse((root / "__init__.py").read_text()).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                return {name: module for name, (module, _) in ast.literal_eval(node.value).items()}
    return {}


def all_imports(root: Path) -> list[Import]:
    """Every import of a gymflow module in the package at `root`, the importing and the imported
    module resolved to files (`gymflow.core.progress`, not `gymflow.core`, for `from gymflow.core
    import progress`); source and target are the top-level units."""
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
                if target is not None:
                    imp = Import(rel.as_posix(), node.lineno, target_module, source, target)
                    found.append(imp)
    return found


def cross_unit_imports(root: Path) -> list[Import]:
    """Every import in the package at `root` from one unit into another."""
    return [imp for imp in all_imports(root) if imp.source != imp.target]


def module_of(module: str, root: Path) -> str:
    """The module a dotted name imports: the longest prefix that is a file or a package."""
    parts = module.split(".")
    while len(parts) > 1:
        path = root.joinpath(*parts[1:])
        if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
            return ".".join(parts)
        parts.pop()
    return module


def inner_imports(root: Path) -> list[Import]:
    """Imports between two modules of one top-level package, with modules for units: the graph
    whose cycles `cycles` finds inside a package."""
    found = []
    for imp in all_imports(root):
        if imp.source != imp.target:
            continue
        source = ".".join(("gymflow", *Path(imp.file).with_suffix("").parts))
        source = source.removesuffix(".__init__")
        target = module_of(imp.module, root)
        if target != source:
            found.append(Import(imp.file, imp.line, imp.module, source, target))
    return found


def upward_imports(imports: list[Import], tiers: dict[str, int]) -> list[str]:
    problems = []
    for imp in imports:
        low, high = tiers.get(imp.source), tiers.get(imp.target)
        if low is not None and high is not None and high > low:
            problems.append(
                f"{imp}: {imp.source} (tier {low}) may not import {imp.target} (tier {high})"
            )
    return problems


def private_imports(imports: list[Import], faces: dict[str, Package]) -> list[str]:
    """Imports from another package of a module or name its `__all__` does not list."""
    return [
        f"{imp}: not in gymflow.{imp.target}.__all__ (add it there if it is meant to be used)"
        for imp in imports
        if imp.target in faces and not faces[imp.target].exposes(imp.module)
    ]


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


def _tiers() -> dict[str, int]:
    return {package.name: package.tier for package in packages(SRC)}


def test_every_package_states_its_tier_and_public_face():
    """Reading them raises LayoutError naming the `__init__` that lacks one."""
    assert {p.name for p in packages(SRC)} == {
        p.name for p in SRC.iterdir() if (p / "__init__.py").exists()
    }


def test_no_loose_modules_at_the_top():
    assert not loose_modules(SRC), "put these modules in the package that owns them"


def test_no_package_imports_a_tier_above_it():
    problems = upward_imports(_checked_imports(), _tiers())
    assert not problems, "imports against the tiers:\n" + "\n".join(problems)


def test_other_packages_import_only_public_names():
    faces = {package.name: package for package in packages(SRC)}
    problems = private_imports(_checked_imports(), faces)
    assert not problems, "imports of private modules:\n" + "\n".join(problems)


def test_no_import_cycle_between_packages():
    problems = cycles(_checked_imports())
    assert not problems, "\n".join(problems)


def test_no_import_cycle_inside_a_package():
    problems = cycles(inner_imports(SRC))
    assert not problems, "\n".join(problems)


def test_every_allowance_is_still_needed():
    present = {(imp.file, imp.module) for imp in cross_unit_imports(SRC)}
    stale = sorted(
        f"{file} -> {module} ({ALLOWED[file, module]})" for file, module in ALLOWED.keys() - present
    )
    assert not stale, f"these edges are gone; delete them from ALLOWED: {stale}"


def _package(root: Path, name: str, tier: int, public: list[str], body: str = "") -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(
        f'"""The {name} package."""\n{body}\n__tier__ = {tier}\n__all__ = {public!r}\n'
    )


def test_the_checks_find_a_cycle_and_an_upward_import(tmp_path):
    """The checks above on a small package: `low` imports `high` inside a function."""
    root = tmp_path / "gymflow"
    _package(root, "low", 0, ["a", "c"])
    _package(root, "high", 1, ["b"], body="from gymflow import low")
    (root / "__init__.py").write_text('_EXPORTS = {"Thing": ("gymflow.high.b", "Thing")}\n')
    (root / "high" / "b.py").write_text("Thing = 1\n")
    (root / "low" / "a.py").write_text("def f():\n    from ..high import b\n")  # the module b
    (root / "low" / "c.py").write_text("from gymflow import Thing\n")  # through the root's API
    imports = cross_unit_imports(root)
    tiers = {p.name: p.tier for p in packages(root)}
    assert tiers == {"low": 0, "high": 1}
    assert upward_imports(imports, tiers) == [
        "src/gymflow/low/a.py:2 imports gymflow.high.b: low (tier 0) may not import high (tier 1)",
        "src/gymflow/low/c.py:1 imports gymflow.high.b: low (tier 0) may not import high (tier 1)",
    ]
    assert cycles(imports) == [
        "import cycle among high, low, e.g. high -> low -> high:\n"
        "    src/gymflow/high/__init__.py:2 imports gymflow.low\n"
        "    src/gymflow/low/a.py:2 imports gymflow.high.b\n"
        "    src/gymflow/low/c.py:1 imports gymflow.high.b"
    ]


def test_the_checks_find_a_cycle_inside_a_package_and_a_private_import(tmp_path):
    """`env/base.py` and `env/resources.py` import each other, one of them inside a function;
    `run/plan.py` imports env's module `hidden`, which env's `__all__` does not list."""
    root = tmp_path / "gymflow"
    _package(root, "env", 0, ["base", "resources"])
    _package(root, "run", 1, [])
    (root / "__init__.py").write_text("")
    (root / "env" / "base.py").write_text("def f():\n    from gymflow.env import resources\n")
    (root / "env" / "resources.py").write_text("from gymflow.env.base import f\n")
    (root / "env" / "hidden.py").write_text("")
    (root / "run" / "plan.py").write_text("from gymflow.env.hidden import x\nimport gymflow.env\n")
    assert cycles(inner_imports(root)) == [
        "import cycle among gymflow.env.base, gymflow.env.resources, e.g. gymflow.env.base -> "
        "gymflow.env.resources -> gymflow.env.base:\n"
        "    src/gymflow/env/base.py:2 imports gymflow.env.resources\n"
        "    src/gymflow/env/resources.py:1 imports gymflow.env.base"
    ]
    faces = {p.name: p for p in packages(root)}
    assert private_imports(cross_unit_imports(root), faces) == [
        "src/gymflow/run/plan.py:1 imports gymflow.env.hidden: not in gymflow.env.__all__ "
        "(add it there if it is meant to be used)"
    ]


def test_a_package_without_a_tier_is_named(tmp_path):
    root = tmp_path / "gymflow"
    (root / "lost").mkdir(parents=True)
    (root / "lost" / "__init__.py").write_text('"""Lost."""\n__all__ = []\n')
    with pytest.raises(LayoutError, match=r"lost/__init__.py: no `__tier__ = N`"):
        packages(root)
