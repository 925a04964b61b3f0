"""The process and store settings the collector changes while it runs (gymflow.rollouts.collect),
and puts back when it ends: the GC's, even when local shards' collectors overlap in one process,
and DuckDB's buffer pool, so the analyses that follow on the same store are not starved."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import duckdb

from gymflow.rollouts.collect import (
    GC_YOUNG_THRESHOLD,
    WRITE_MEMORY_LIMIT,
    _Committer,
    _run_long_gc,
)


def test_overlapping_collectors_restore_the_gc_settings_when_the_last_ends() -> None:
    before = gc.get_threshold()
    first, second = _run_long_gc(), _run_long_gc()
    first.__enter__()
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD and gc.get_freeze_count() > 0
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD and gc.get_freeze_count() > 0
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def _memory_limit(con) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def test_the_store_buffer_pool_is_capped_while_writing_and_reset_after(tmp_path: Path) -> None:
    probe = duckdb.connect()
    probe.execute(f"SET memory_limit = '{WRITE_MEMORY_LIMIT}'")
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    default = _memory_limit(con)
    committer = _Committer(con)
    assert _memory_limit(con) == _memory_limit(probe) != default
    asyncio.run(committer.drain())
    committer.close()
    assert _memory_limit(con) == default
