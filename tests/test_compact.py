"""A finished run's store is rewritten without its free blocks, holding exactly the same rows."""

from __future__ import annotations

import duckdb
import pytest

from gymflow.store.compact import compact, free_share
from gymflow.store.db import connect, store_path
from gymflow.store.seal_key import load_key
from gymflow.store.sealed_rows import seal_rows
from tests.analysis.builder import RunMeta, StoreBuilder


def _snapshot(run_dir) -> dict[str, list[tuple]]:
    with connect(run_dir, read_only=True) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables}


@pytest.fixture
def fragmented(tmp_path):
    """A store written in many small commits, a third of its rollouts then deleted: free blocks."""
    builder = StoreBuilder(RunMeta(repeats=4))
    for i in range(300):
        builder.task(f"t{i:03d}", answer=i)
        builder.fill(f"t{i:03d}", "1010")
    run_dir = builder.write(tmp_path / "run")
    with connect(run_dir) as con:
        for table in ("model_calls", "verifications"):
            con.execute(
                f"DELETE FROM {table} WHERE rollout_id IN "
                "(SELECT rollout_id FROM rollouts WHERE repeat_index = 3)"
            )
        con.execute("DELETE FROM rollouts WHERE repeat_index = 3")
        # the deletes sealed as a writer seals its own (`seal_rows`: the records of the
        # rollouts and calls, and the store's generation over them): compaction copies only a
        # store whose seals match
        key = load_key(create=False)
        assert key is not None
        seal_rows(con, key)
        con.execute("CHECKPOINT")
    return run_dir


def test_a_store_with_free_blocks_is_rewritten_smaller_with_the_same_rows(fragmented):
    before = _snapshot(fragmented)
    share = free_share(store_path(fragmented))
    assert share >= 0.1
    result = compact(fragmented, min_free_bytes=0)
    assert result.rewritten and result.after_bytes < result.before_bytes
    assert free_share(store_path(fragmented)) == 0
    assert _snapshot(fragmented) == before
    # still a writable store, with its schema and its keys
    with connect(fragmented) as con, pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO rollouts SELECT * FROM rollouts LIMIT 1")
    assert not (fragmented / "gymflow.duckdb.compact").exists()


def test_a_compact_store_is_left_alone(fragmented):
    compact(fragmented, min_free_bytes=0)
    inode = store_path(fragmented).stat().st_ino
    assert compact(fragmented, min_free_bytes=0).rewritten is False
    assert store_path(fragmented).stat().st_ino == inode


def test_a_copy_left_by_a_killed_compaction_is_replaced(fragmented):
    before = _snapshot(fragmented)
    (fragmented / "gymflow.duckdb.compact").write_bytes(b"half a file")
    assert compact(fragmented, min_free_bytes=0).rewritten
    assert _snapshot(fragmented) == before


def test_a_store_whose_free_blocks_hold_little_is_left_alone(fragmented):
    """A tenth free, but a few hundred KiB: not worth a copy at the end of every small run."""
    assert free_share(store_path(fragmented)) >= 0.1
    inode = store_path(fragmented).stat().st_ino
    assert compact(fragmented).rewritten is False
    assert store_path(fragmented).stat().st_ino == inode
