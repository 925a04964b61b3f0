"""Finding components by name: the one registry behind verifiers, harnesses and environments.

A `Registry[T]` holds what its package registered (a decorator calls `register`), and on a miss
looks further in one order: the installed packages' entry points of its group, then, when the
registry allows it, a `module:attribute` import path naming a user's own component. A name found
nowhere raises `UnknownName`, which names the kind, the name and every known name. Loading code
from an import path, an entry point or a file happens here and nowhere else.

A file found only on the data path (a selection in a run folder, which whoever can write the folder
fills) is read by an allow-list: each model field says what it is to such a file (`FromData`), and
a name it chooses is taken only among those its registry holds `for_data` (`Registry.for_data`),
never through an import path or entry point."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from gymflow.core.errors import UserError

T = TypeVar("T")


class RegistryError(UserError, LookupError):
    """A component that cannot be found or loaded; the message names it (and its file)."""


class UnknownName(RegistryError):
    """A name no registry entry, entry point or import path provides."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = "") -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) or "none"
        super().__init__(f"unknown {kind} {name!r} (known: {listed}{hint})")


def import_object(path: str, kind: str = "object") -> Any:
    """The attribute an import path `module:attribute` names. Raises RegistryError."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise RegistryError(f"{kind} {path!r}: not an import path (module:attribute)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"{kind} {path!r}: cannot import {module_name!r}: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise RegistryError(f"{kind} {path!r}: {module_name!r} has no {attribute!r}") from None


def import_from_file(path: Path, module_name: str, attribute: str) -> Any:
    """`attribute` of the module in file `path`, imported once under `module_name` (a later call
    reuses it, so what the module registers on import is registered once)."""
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise RegistryError(f"{path}: cannot import module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]  # a fixed file imports afresh on the next try
            raise
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise RegistryError(f"{path}: no {attribute!r}") from None


@functools.cache
def entry_point_objects(group: str) -> tuple[Any, ...]:
    """Every object installed packages publish under the entry-point group `group`. Read once
    per process: scanning every installed distribution took ~11 ms, and a small run asked ~7
    times. A package installed meanwhile counts from the next command on."""
    return tuple(entry.load() for entry in entry_points(group=group))


class Registry(Generic[T]):
    """Components of one kind by name.

    `builtins` imports the package whose modules register the shipped components (called once,
    before the first lookup); `entry_point_group` is where installed packages publish theirs
    (entry-point name = component name); `import_paths` lets a name be `module:attribute`, and
    `check` refuses what an entry point or import path loads that is no component of this kind."""

    def __init__(
        self,
        kind: str,
        *,
        builtins: Callable[[], object] | None = None,
        entry_point_group: str | None = None,
        import_paths: bool = False,
        check: Callable[[object], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._builtins = builtins
        self._import_paths = import_paths
        self._check = check
        self._items: dict[str, T] = {}
        self._for_data: set[str] = set()

    def register(self, name: str, item: T, *, for_data: bool = False) -> T:
        """Hold `item` under `name` (a later registration of the name replaces it, and is
        `for_data` only if it says so too). `for_data`: a file found only on the data path may
        choose it, because it treats a row as data only: it loads no row content as code and
        starts or calls no server."""
        self._items[name] = item
        if for_data:
            self._for_data.add(name)
        else:
            self._for_data.discard(name)
        return item

    def get(self, name: str) -> T:
        """The component named `name`. Raises UnknownName, or RegistryError when an import path
        or entry point names something that does not load."""
        self._load_builtins()
        if name in self._items:
            return self._items[name]
        if self._import_paths and ":" in name:
            return self._accept(name, import_object(name, self.kind))
        if self.entry_point_group:
            for entry in entry_points(group=self.entry_point_group, name=name):
                return self._accept(name, entry.load())
        hint = "; or give module:attribute of your own" if self._import_paths else ""
        raise UnknownName(self.kind, name, self._items, hint)

    def names(self) -> list[str]:
        """The registered names, sorted (installed entry points count once looked up)."""
        self._load_builtins()
        return sorted(self._items)

    def for_data(self) -> list[str]:
        """The names registered `for_data`, sorted: all a data-path file may choose. Never an
        import path or entry point: a name such a file gives imports nothing."""
        self._load_builtins()
        return sorted(self._for_data)

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return name in self._items

    def _accept(self, name: str, item: Any) -> T:
        if self._check is not None and not self._check(item):
            raise RegistryError(f"{self.kind} {name!r}: {item!r} is not a {self.kind}")
        return self.register(name, item)

    def _load_builtins(self) -> None:
        if self._builtins is not None:
            load, self._builtins = self._builtins, None
            try:
                load()
            except BaseException:
                self._builtins = load  # the next lookup tries again (and shows the error again)
                raise


@dataclass(frozen=True, slots=True)
class FromData:
    """What a model field is to a file found only on the data path (`Annotated[T, DATA]`): data
    (`chooses` None: text, numbers, rows, a nested model whose own fields say), or the name of a
    component of kind `chooses`, taken only among the names its registry holds `for_data`. A
    field without this marker is refused in such a file: a field added later is not data until
    it is marked so."""

    chooses: str | None = None


#: The marker of a field that is data wherever its file came from.
DATA = FromData()


def beyond_data_fields(
    model: BaseModel, prefix: str = ""
) -> Iterator[tuple[str, FromData | None, Any]]:
    """Each field the file gave `model` (its defaults are gymflow's own) that is not plain
    data: its dotted path, its marker (None: not marked, so not data) and its value. A nested
    model marked data is walked through its own fields."""
    for name in sorted(model.model_fields_set):
        info = type(model).model_fields[name]
        marker = next((m for m in info.metadata if isinstance(m, FromData)), None)
        value = getattr(model, name)
        path = f"{prefix}{name}"
        if marker is None or marker.chooses is not None:
            yield path, marker, value
        elif isinstance(value, BaseModel):
            yield from beyond_data_fields(value, f"{path}.")
