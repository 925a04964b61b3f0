"""Rewriting a finished run's store without its free blocks.

A run commits its rollouts in small groups as they finish (so a kill loses little), and DuckDB
reuses the blocks a checkpoint frees but never gives them back: a 20,000-rollout single-turn
store holds about 15% free blocks, and a copy of it is 11% smaller (1,049 -> 918 bytes a rollout,
bench/store_size.py). Once a run's writes are done, a store with enough free space is copied into
a fresh file, which then replaces it in one rename: a kill at any point leaves either the old
store or the new one, never a half-written one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from gymflow.store.db import store_path
from gymflow.written import written

#: Rewrite when at least this share of the store's blocks are free.
MIN_FREE_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Compaction:
    before_bytes: int
    after_bytes: int
    free_share: float
    rewritten: bool


def free_share(path: Path) -> float:
    with duckdb.connect(str(path), read_only=True) as con:
        total, free = con.execute(
            "SELECT total_blocks, free_blocks FROM pragma_database_size()"
        ).fetchone()
    return free / total if total else 0.0


def compact(run_dir: Path | str, *, min_free_share: float = MIN_FREE_SHARE) -> Compaction:
    """Copy the store into a fresh file when at least `min_free_share` of its blocks are free.
    Call it only when nothing writes the store (a reader that has it open keeps the old file)."""
    path = store_path(run_dir)
    before = path.stat().st_size
    share = free_share(path)
    if share < min_free_share or path.with_name(path.name + ".wal").exists():
        return Compaction(before, before, share, rewritten=False)
    with written(path) as (fresh,), duckdb.connect() as con:
        con.execute("ATTACH ? AS old (READ_ONLY)", [str(path)])
        con.execute("ATTACH ? AS fresh", [str(fresh)])
        con.execute("COPY FROM DATABASE old TO fresh")
        con.execute("DETACH fresh")
    return Compaction(before, path.stat().st_size, share, rewritten=True)
