"""Every write to a store goes through one transaction guard, which keeps the error that says why
a COMMIT failed instead of the "no transaction is active" a second ROLLBACK raises."""

from __future__ import annotations

import duckdb
import pytest

from gymflow.store.db import transaction


class _FailingCommit:
    """A connection whose COMMIT fails (and so has rolled back already), as on a full disk."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def execute(self, sql: str, *args):
        self.sent.append(sql)
        if sql == "COMMIT":
            raise duckdb.IOException("could not write block: No space left on device")
        if sql == "ROLLBACK":
            raise duckdb.TransactionException("cannot rollback - no transaction is active")
        return self


def test_a_failed_commit_keeps_its_own_error():
    con = _FailingCommit()
    with pytest.raises(duckdb.IOException, match="No space left on device"), transaction(con):
        con.execute("INSERT INTO t VALUES (1)")
    assert con.sent == ["BEGIN TRANSACTION", "INSERT INTO t VALUES (1)", "COMMIT", "ROLLBACK"]


def test_an_error_inside_rolls_back_and_nothing_is_kept(tmp_path):
    with duckdb.connect(str(tmp_path / "s.duckdb")) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        with pytest.raises(ZeroDivisionError), transaction(con):
            con.execute("INSERT INTO t VALUES (1)")
            _ = 1 / 0
        with transaction(con):
            con.execute("INSERT INTO t VALUES (2)")
        assert con.execute("SELECT x FROM t").fetchall() == [(2,)]
