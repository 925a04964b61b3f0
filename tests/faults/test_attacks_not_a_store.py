"""What sits at RUN/gymflow.duckdb when it is no DuckDB store (attack pass 5, s09): a FIFO
(any user can make one) made `gym eval health`, and `gym runs list` of the root holding it,
wait forever; a SQLite file made DuckDB try to download an extension. Now each is one line
naming the file, before DuckDB opens it, and a listing skips it."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym, gym_in_process
from tests.faults.stores import collect_run


def _plant(kind: str, store: Path) -> None:
    store.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(store)
    elif kind == "folder":
        store.mkdir()
    elif kind == "sqlite":
        with sqlite3.connect(store) as con:
            con.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    elif kind == "parquet":
        duckdb.sql(f"COPY (SELECT 1 AS a) TO '{store}' (FORMAT parquet)")
    elif kind == "csv":
        store.write_text("a,b\n1,2\n")
    else:
        store.write_bytes(b"")


KINDS = ("fifo", "folder", "sqlite", "parquet", "csv", "empty")


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_that_is_no_store_is_one_line_and_never_waits(tmp_path: Path, kind: str) -> None:
    store = tmp_path / "run" / "gymflow.duckdb"
    _plant(kind, store)
    # a FIFO opened would wait: a process, which its timeout ends
    runner = gym if kind == "fifo" else gym_in_process
    done = runner("eval", "health", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    expected = "not a regular file" if kind in ("fifo", "folder") else "not a DuckDB database"
    assert line.startswith(f"error: {store}: {expected}"), line


def test_a_listing_skips_a_fifo_among_its_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    collect_run(root / "good")
    _plant("fifo", root / "planted" / "gymflow.duckdb")
    done = gym("runs", "list", str(root), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "skipped" in said and "planted" in said and "not a regular file" in said, said
    shutil.rmtree(root / "planted")
