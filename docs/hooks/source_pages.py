"""MkDocs hook: the parts of pages that quote the code, taken from the code on every build, so a
page cannot show source or a table that no longer exists (a name that is gone fails the build).

- `<!-- source: PATH NAME -->` becomes the source of the top-level definition NAME (its
  decorators and docstring included) in PATH, or of its imports for NAME `imports`;
- `<!-- file: PATH -->` becomes the whole file at PATH (a manifest, a YAML file);
- `<!-- store-tables -->` becomes every table of a run store with its columns, types and key,
  from `gymflow.store.schema.SPECS`."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = re.compile(r"<!-- source: (\S+) (\S+) -->")
FILE = re.compile(r"<!-- file: (\S+) -->")
#: A quoted file's fence language, by its suffix.
LANGUAGES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".py": "python", ".sh": "bash"}
STORE_TABLES = "<!-- store-tables -->"


def definition(path: str, name: str) -> str:
    text = (ROOT / path).read_text()
    lines = text.splitlines()
    body = ast.parse(text).body
    if name == "imports":
        found = [node for node in body if isinstance(node, ast.Import | ast.ImportFrom)]
        return "\n".join(lines[found[0].lineno - 1 : found[-1].end_lineno])
    for node in body:
        named = getattr(node, "name", None) or _assigned(node)
        if named == name:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            return "\n".join(lines[first - 1 : node.end_lineno])
    raise ValueError(f"{path} defines no {name!r} at its top level (a docs page quotes it)")


def _assigned(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _quoted_file(path: str) -> str:
    text = (ROOT / path).read_text().rstrip("\n")
    return f"```{LANGUAGES.get(Path(path).suffix, 'text')}\n{text}\n```"


def store_tables() -> str:
    from gymflow.store.schema import SPECS

    out = []
    for table in SPECS:
        key = ", ".join(table.key) or "none"
        out += [f"### `{table.name}`", "", f"Key: {key}.", "", "| column | type |", "|---|---|"]
        out += [
            f"| `{column.name}` | {column.type}{' (added later)' if column.added else ''} |"
            for column in table.columns
        ]
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = SOURCE.sub(
        lambda m: f"```python\n{definition(m.group(1), m.group(2))}\n```", markdown
    )
    markdown = FILE.sub(lambda m: _quoted_file(m.group(1)), markdown)
    if STORE_TABLES in markdown:
        markdown = markdown.replace(STORE_TABLES, store_tables())
    return markdown
