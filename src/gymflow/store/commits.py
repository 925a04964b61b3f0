"""A store's transactions (`transaction`), and what a writer does as one ends (`Open`): last in
it (the store's generation, sealed over every seal record the transaction wrote) and once it
has committed (the generation recorded beside the seal key, never for a transaction that rolled
back). Apart from `db`, which imports the seal, so that the
seal need not import `db` (`generations.py`)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import duckdb


@dataclass
class Open:
    """A transaction open on a connection: what runs last in it and once it committed, by
    name (one each per name, the last given)."""

    before: dict[str, Callable[[], None]] = field(default_factory=dict)
    after: dict[str, Callable[[], None]] = field(default_factory=dict)


_open: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, Open] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Generator[None]:
    """BEGIN, then COMMIT, or ROLLBACK on any error. A COMMIT that failed has rolled back
    already, and a second ROLLBACK would raise "no transaction is active" in place of the error
    that says why: that one is kept. What `Open.before` holds runs just before the COMMIT, in the
    transaction; what `Open.after` holds, once it committed."""
    con.execute("BEGIN TRANSACTION")
    hooks = Open()
    with contextlib.suppress(TypeError):  # not weakly referable: nothing can be deferred
        _open[con] = hooks
    try:
        yield
        for hook in hooks.before.values():
            hook()
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    finally:
        with contextlib.suppress(TypeError, KeyError):
            del _open[con]
    for hook in hooks.after.values():
        hook()


def open_transaction(con: duckdb.DuckDBPyConnection) -> Open | None:
    """The `transaction` open on `con` (the same object until it ends), or None: each
    statement commits as it runs."""
    try:
        return _open.get(con)
    except TypeError:
        return None
