"""The plan of gymflow's house, as its packages state it: each top-level package's `__init__`
declares its tier (`__tier__`, lowest first), what it holds (its docstring) and what other
packages may import from it (`__all__`: public modules, or names defined in the `__init__`).

Read from the source files, never by importing them, so the layer test (tests/test_layers.py)
and the docs' layers page (docs/hooks) see the same plan without running any package's code."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from gymflow.core.errors import UserError

#: Where the packages are: this file sits in gymflow/core.
ROOT = Path(__file__).resolve().parents[1]


class LayoutError(UserError, ValueError):
    """A package `__init__` that does not state its tier or its public face; the message names
    the file."""


@dataclass(frozen=True, slots=True)
class Package:
    name: str  # gymflow.<name>
    tier: int
    summary: str  # the docstring's first paragraph
    cutoff: str  # its paragraph "Cut-off: ...": where the package stops
    public: tuple[str, ...]  # its __all__

    def exposes(self, module: str) -> bool:
        """Whether another package may import `module` (gymflow.<name>.…): the package itself,
        a public module, or anything inside a public subpackage."""
        parts = module.split(".")[2:]
        return not parts or parts[0] in self.public


def packages(root: Path = ROOT) -> list[Package]:
    """Every top-level package under `root`, by tier and name. Raises LayoutError for an
    `__init__` without `__tier__` (an int), a docstring or `__all__` (a list of strings)."""
    found = [
        _read(path.parent.name, path)
        for path in sorted(root.glob("*/__init__.py"))
        if path.parent.name != "__pycache__"
    ]
    return sorted(found, key=lambda p: (p.tier, p.name))


def loose_modules(root: Path = ROOT) -> list[str]:
    """Modules at the top of `root` other than its `__init__`: the layout has none."""
    return sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")


def _read(name: str, path: Path) -> Package:
    tree = ast.parse(path.read_text(), str(path))
    doc = ast.get_docstring(tree)
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in ("__tier__", "__all__"):
                    if node.value is None:  # `__all__: list[str]` with no value states nothing
                        continue
                    try:
                        values[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        raise LayoutError(f"{path}: {target.id} must be a literal") from None
    tier, public = values.get("__tier__"), values.get("__all__")
    names: list[object] = list(cast(list[object], public)) if isinstance(public, list) else []
    if not doc:
        raise LayoutError(f"{path}: no docstring saying what the package holds")
    if not isinstance(tier, int) or isinstance(tier, bool):
        raise LayoutError(f"{path}: no `__tier__ = N` (an int: the package's tier)")
    if not isinstance(public, list) or not all(isinstance(n, str) for n in names):
        raise LayoutError(f"{path}: no `__all__` list naming what other packages may use")
    paragraphs = [p.replace("\n", " ") for p in doc.split("\n\n")]
    cutoff = next((p for p in paragraphs if p.startswith("Cut-off:")), "")
    return Package(name, tier, paragraphs[0], cutoff, tuple(str(n) for n in names))
