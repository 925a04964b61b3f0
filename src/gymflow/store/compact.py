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

from gymflow.core.written import written
from gymflow.store.db import store_path

#: Rewrite when at least this share of the store's blocks are free.
MIN_FREE_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Compaction:
    before_bytes: int
    after_bytes: int
    free_share: float
    rewritten: bool


def _attached_free_share(con) -> float:
    total, free = con.execute(
        "SELECT total_blocks, free_blocks FROM pragma_database_size() WHERE database_name = 'old'"
    ).fetchone()
    return free / total if total else 0.0


def _attached(path: Path):
    """An in-memory connection with the store attached read-only as `old`: the one handle the
    compaction measures and copies through."""
    con = duckdb.connect()
    con.execute("ATTACH ? AS old (READ_ONLY)", [str(path)])
    return con


def free_share(path: Path) -> float:
    with _attached(path) as con:
        return _attached_free_share(con)


def compact(run_dir: Path | str, *, min_free_share: float = MIN_FREE_SHARE) -> Compaction:
    """Copy the store into a fresh file when at least `min_free_share` of its blocks are free.
    Call it only when nothing writes the store (a reader that has it open keeps the old file)."""
    path = store_path(run_dir)
    before = path.stat().st_size
    if path.with_name(path.name + ".wal").exists():
        return Compaction(before, before, free_share(path), rewritten=False)
    with _attached(path) as con:
        share = _attached_free_share(con)
        if share < min_free_share:
            return Compaction(before, before, share, rewritten=False)
        with written(path) as (fresh,):
            con.execute("ATTACH ? AS fresh", [str(fresh)])
            con.execute("COPY FROM DATABASE old TO fresh")
            con.execute("DETACH fresh")
            con.execute("DETACH old")  # before the fresh file takes the old one's name
    return Compaction(before, path.stat().st_size, share, rewritten=True)
