"""The path each connection's store was opened at, as the caller named it. DuckDB reports the
file's real path (links followed); the seal's ledger knows a store by both (`seal.store_names`):
a sealed store's path made a link to a stripped copy would otherwise read as never sealed.

Apart from `db`, which names each connection it opens, because the seal reads it and `db`
imports the seal only where it must."""

from __future__ import annotations

import contextlib
import os
import weakref
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
