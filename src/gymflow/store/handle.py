"""The store handle: one run store's connection, opened, typed and closed in one place.

Cut-off: this is the door to gymflow's tables. A `Store` owns its connection; the query modules
(`gymflow.store.queries`) take that connection (`Connection`) and own every statement naming a
table, so a column change touches `schema` and those modules only. Other packages call them and
write no SQL against the tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

import duckdb

from gymflow.store.db import StoreError, connect, store_path

#: An open connection (or a cursor of one) to a run store: what every query function takes.
Connection: TypeAlias = duckdb.DuckDBPyConnection


def one_row(con: Connection, sql: str, params: Sequence[object] = ()) -> tuple[Any, ...]:
    """The row of a query that always returns one (an aggregate without GROUP BY)."""
    row = con.execute(sql, params).fetchone()
    if row is None:
        raise StoreError(f"no row where one was certain: {sql.split()[:6]}")
    return row


@dataclass(frozen=True, slots=True)
class Store:
    """An open run store: where it is, its connection, and whether it may be written."""

    path: Path
    con: Connection
    read_only: bool

    @classmethod
    def open(cls, run_dir: Path | str, *, create: bool = False, read_only: bool = False) -> Store:
        """The store of `run_dir` (a run folder or a `.duckdb` file), opened as `db.connect`
        opens it: schema checked, foreign objects refused, waiting while another process holds
        it."""
        con = connect(run_dir, create=create, read_only=read_only)
        return cls(store_path(run_dir), con, read_only)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
