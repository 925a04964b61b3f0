"""The analysis's cache key follows the store file: the same while nothing writes the store,
new after any write or after the store is replaced (a compaction), and taken without opening it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from gymflow.steps.analysis import _store_key
from gymflow.store.compact import compact
from gymflow.store.db import connect
from tests.analysis.builder import StoreBuilder

CONTEXT = SimpleNamespace(task=SimpleNamespace(name="analyse-run"))


def _key(run_dir: Path) -> str:
    return _store_key(CONTEXT, {"run_dir": str(run_dir)})


def test_the_key_changes_with_every_write_and_only_then(tmp_path: Path) -> None:
    b = StoreBuilder()
    b.task("t0", 10)
    b.fill("t0", "10")
    run_dir = b.write(tmp_path / "run")
    key = _key(run_dir)
    with connect(run_dir, read_only=True) as con:  # reading changes nothing
        con.execute("SELECT count(*) FROM rollouts").fetchone()
    assert _key(run_dir) == key

    with connect(run_dir) as con:  # a write that leaves every row (and seal) as it was
        con.execute("CREATE TABLE scratch (a INTEGER)")
        con.execute("DROP TABLE scratch")
    written = _key(run_dir)
    assert written != key

    assert compact(run_dir, min_free_share=0.0, min_free_bytes=0).rewritten
    assert _key(run_dir) not in (key, written)
