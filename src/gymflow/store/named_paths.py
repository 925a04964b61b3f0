"""The path each connection's store was opened at, as the caller named it. DuckDB reports the
file's real path (links followed); the seal's ledgers know a store by both (`store_names`): a
sealed store's path made a link to a stripped copy would otherwise read as never sealed.

Apart from `db`, which names each connection it opens, because the seal reads it and `db`
imports the seal only where it must."""

from __future__ import annotations

import contextlib
import contextvars
import os
import weakref
from collections.abc import Generator
from pathlib import Path

from duckdb import DuckDBPyConnection

_named: weakref.WeakKeyDictionary[DuckDBPyConnection, str] = weakref.WeakKeyDictionary()


def name(con: DuckDBPyConnection, path: Path) -> DuckDBPyConnection:
    """`con`, noted as opened at `path` (absolute, links not followed)."""
    with contextlib.suppress(TypeError):  # not weakly referable
        _named[con] = os.path.abspath(path)
    return con


def named_path(con: DuckDBPyConnection) -> str | None:
    """The absolute path `con`'s store was opened at (None: unknown, e.g. a connection `db`
    did not make)."""
    try:
        return _named.get(con)
    except TypeError:
        return None


#: `store_names` of each connection asked, once: a connection's file does not change (a
#: writer asks at every batch).
_store_names: weakref.WeakKeyDictionary[DuckDBPyConnection, tuple[str, ...]] = (
    weakref.WeakKeyDictionary()
)


def store_names(con: DuckDBPyConnection) -> tuple[str, ...]:
    """The store file `con` has open by the path it was opened at and by its real path (one,
    when they are the same; none: in memory)."""
    with contextlib.suppress(TypeError, KeyError):
        return _store_names[con]
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    if not row or not row[0]:
        return ()
    named = named_path(con)
    real = os.path.realpath(row[0])  # DuckDB reports the file it opened, links followed
    names = (real,) if named is None or os.path.abspath(named) == real else (named, real)
    with contextlib.suppress(TypeError):
        _store_names[con] = names
    return names


def path_names(path: Path | str) -> tuple[str, ...]:
    """`path` as named (absolute) and as it resolves. The ledgers list a store by both: a
    sealed store's path turned into a link to a copy stripped of its seals would otherwise read
    as a store never sealed (attack pass 4: pass@1 0.60 -> 1.00, healthy)."""
    named, real = os.path.abspath(path), os.path.realpath(path)
    return (named,) if named == real else (named, real)


#: Stores being built aside (an import's staging folder), recorded only at their final path.
_BUILT_ASIDE: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "gymflow_built_aside", default=frozenset()
)


@contextlib.contextmanager
def built_aside(path: Path | str) -> Generator[None]:
    """Inside, the store at `path` is not recorded as sealed: it is built to be renamed, and
    the caller records it where it ends up (`seal.remember`)."""
    token = _BUILT_ASIDE.set(_BUILT_ASIDE.get() | set(path_names(path)))
    try:
        yield
    finally:
        _BUILT_ASIDE.reset(token)


def recorded_names(con: DuckDBPyConnection) -> tuple[str, ...]:
    """The names a writer records the store `con` has open by (`store_names`): none while it is
    built aside."""
    names = store_names(con)
    return () if set(names) & _BUILT_ASIDE.get() else names
