"""A store's transactions (`transaction`), and what a writer does once one has committed
(`after_commit`): the store's generation is recorded beside the seal key only then
(`generations.py`). Apart from `db`, which imports the seal, so that the seal need not import
`db`."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Generator

import duckdb

#: What to do once each open `transaction` has committed, by connection, then by name.
_after_commit: weakref.WeakKeyDictionary[
    duckdb.DuckDBPyConnection, dict[str, Callable[[], None]]
] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Generator[None]:
    """BEGIN, then COMMIT, or ROLLBACK on any error. A COMMIT that failed has rolled back
    already, and a second ROLLBACK would raise "no transaction is active" in place of the error
    that says why: that one is kept. What `after_commit` was given runs once it committed."""
    con.execute("BEGIN TRANSACTION")
    hooks: dict[str, Callable[[], None]] = {}
    with contextlib.suppress(TypeError):  # not weakly referable: nothing can be deferred
        _after_commit[con] = hooks
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    finally:
        with contextlib.suppress(TypeError, KeyError):
            del _after_commit[con]
    for hook in hooks.values():
        hook()


def open_transaction(con: duckdb.DuckDBPyConnection) -> object | None:
    """A token of the `transaction` open on `con` (the same object until it ends), or None."""
    try:
        return _after_commit.get(con)
    except TypeError:
        return None


def after_commit(con: duckdb.DuckDBPyConnection, name: str, hook: Callable[[], None]) -> bool:
    """Run `hook` once the `transaction` open on `con` commits (never, if it rolls back); one
    hook per `name`, the last given. False when no transaction is open on `con` (each statement
    commits as it runs): the caller runs it now."""
    try:
        hooks = _after_commit.get(con)
    except TypeError:
        return False
    if hooks is None:
        return False
    hooks[name] = hook
    return True
