"""The one YAML loader gymflow uses (configs, benchmarks, environment manifests, `--set` and
`--param` values): PyYAML's safe loader with a bound on what aliases can expand to.

A YAML alias is a reference: nine nested levels of nine aliases make a 538-byte file that loads
as a small graph but expands to 9**9 strings as soon as anything walks it (a JSON dump, a
pydantic validation), which took `gym eval run` to 5.3 GB before a MemoryError. Here the
composed node graph is measured before anything is constructed: its size as a tree (each alias
counted as a copy of what it names), computed once per distinct node, so the check costs what
the file's own size does. A recursive alias (a node that contains itself) is refused too, and so
is an integer longer than MAX_INT_DIGITS, named by its field and line (Python's own bound, 4,300
digits, was a ValueError traceback from inside the loader)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from gymflow.core.errors import UserError

#: Nodes a document may expand to through its aliases. Configs, benchmarks and manifests hold
#: hundreds; a dataset of a few thousand rows in YAML stays well below.
MAX_EXPANDED_NODES = 1_000_000
#: Longest integer a document may hold, in characters: past any seed, count or answer a config
#: holds, and well inside what Python converts (4,300 digits).
MAX_INT_DIGITS = 1000
_INT_TAG = "tag:yaml.org,2002:int"
#: Longest YAML file read: `gym env validate /dev/zero` read until the kernel killed it.
MAX_FILE_BYTES = 64 * 1024 * 1024


class YamlBombError(UserError, yaml.YAMLError):
    """A document whose aliases expand past the bound, or refer to themselves."""


class YamlNumberError(UserError, yaml.YAMLError):
    """An integer too long to hold: its field and line say which."""


class YamlFileError(UserError, yaml.YAMLError):
    """A YAML file that cannot be read as text: over MAX_FILE_BYTES, or not UTF-8."""


def _expanded_size(root: yaml.Node) -> int:
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node, field: str | None = None) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise YamlBombError("an alias refers to a node that contains it (recursive YAML)")
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child, field)
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else field
                total += size(key_node) + size(value_node, name)
        elif node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
            where = f"field {field!r}, " if field is not None else ""
            raise YamlNumberError(
                f"{where}line {node.start_mark.line + 1}: an integer of {len(node.value)} "
                f"characters (at most {MAX_INT_DIGITS})"
            )
        in_progress.discard(key)
        if total > MAX_EXPANDED_NODES:
            raise YamlBombError(
                f"aliases expand it to more than {MAX_EXPANDED_NODES:,} values (a YAML alias bomb?)"
            )
        sizes[key] = total
        return total

    return size(root)


class _BoundedLoader(yaml.SafeLoader):
    def construct_document(self, node: yaml.Node) -> Any:
        _expanded_size(node)
        # PyYAML is untyped: what it constructs is any YAML value
        return super().construct_document(node)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def safe_load(stream: str | bytes) -> Any:
    """`yaml.safe_load`, refusing alias bombs with `YamlBombError` (a `yaml.YAMLError`)."""
    loader = _BoundedLoader(stream)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise YamlBombError("nested too deeply to read; refused") from None
    finally:
        loader.dispose()  # pyright: ignore[reportUnknownMemberType] (PyYAML is untyped)


def read_text(path: Path) -> str:
    """A YAML file's text; `YamlFileError` for one over MAX_FILE_BYTES (or endless, as a device
    is), a FIFO or socket, or not UTF-8 (a binary named by mistake); OSError as `open` raises
    it. Opened without blocking: a FIFO named `*.yaml` in a folder of benchmarks hung `gym list
    benchmarks` and every run naming a benchmark, waiting for a writer (attack pass 6, s20)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        kind = os.fstat(fd).st_mode
        if stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind):
            raise YamlFileError("a FIFO or socket, not a file")
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise YamlFileError(f"longer than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None
