"""Rewriting a finished run's store without its free blocks.

A run commits its rollouts in small groups as they finish (so a kill loses little), and DuckDB
reuses the blocks a checkpoint frees but never gives them back: a 20,000-rollout single-turn
store holds about 15% free blocks, and a copy of it is 11% smaller (1,049 -> 918 bytes a rollout,
bench/store_size.py). Once a run's writes are done, a store with enough free space is copied into
a fresh file (enough: a tenth of its blocks and at least 4 MiB, since the copy costs a run's fixed
time (0.17 s at 200 rollouts, bench/fixed_cost.py) and a small store's free blocks are a few
hundred KiB), which then replaces it in one rename: a kill at any point leaves either the old
store or the new one, never a half-written one.

What is copied is opened as every reader opens a store (`db.connect`: no object gymflow did not
create, the exact schema, stored values in bounds) and, since the copy carries its rows into a
new file, checked as every writer checks one (`sealed_first.check_before_writing`: every seal
recomputed). A store that fails is refused, naming it, before anything is written. The copy is
made from that same connection, so the file copied is the file checked: the store was once
ATTACHed by its path with no check, and `COPY FROM DATABASE` carried whatever it held (a view,
a macro) into the fresh file under the store's name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gymflow.core.written import written
from gymflow.store.db import connect, store_path
from gymflow.store.handle import Connection, one_row
from gymflow.store.sealed_first import check_before_writing

#: Rewrite when at least this share of the store's blocks are free...
MIN_FREE_SHARE = 0.1
#: ...and they hold at least this many bytes.
MIN_FREE_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Compaction:
    before_bytes: int
    after_bytes: int
    free_share: float
    rewritten: bool


def _free(con: Connection) -> tuple[float, int]:
    """The share of the store's blocks that are free, and their bytes."""
    total, free, block = one_row(
        con,
        "SELECT total_blocks, free_blocks, block_size FROM pragma_database_size() "
        "WHERE database_name = current_database()",
    )
    return (free / total if total else 0.0), free * block


def free_share(path: Path) -> float:
    with connect(path, read_only=True) as con:
        return _free(con)[0]


def compact(
    run_dir: Path | str,
    *,
    min_free_share: float = MIN_FREE_SHARE,
    min_free_bytes: int = MIN_FREE_BYTES,
) -> Compaction:
    """Copy the store into a fresh file when at least `min_free_share` of its blocks are free
    and they hold at least `min_free_bytes`.
    Call it only when nothing writes the store (a reader that has it open keeps the old file).
    Raises StoreError or SealsBroken, naming the store, for one that is not what gymflow
    wrote; nothing is written then."""
    path = store_path(run_dir)
    before = path.stat().st_size
    if path.with_name(path.name + ".wal").exists():
        return Compaction(before, before, free_share(path), rewritten=False)
    with connect(path, read_only=True) as con:
        share, free_bytes = _free(con)
        if share < min_free_share or free_bytes < min_free_bytes:
            return Compaction(before, before, share, rewritten=False)
        check_before_writing(con, f"{path}: not compacted")
        database = str(one_row(con, "SELECT current_database()")[0]).replace('"', '""')
        with written(path) as (fresh,):
            # READ_WRITE: an attached file takes the read-only connection's mode otherwise
            con.execute("ATTACH ? AS fresh (READ_WRITE)", [str(fresh)])
            con.execute(f'COPY FROM DATABASE "{database}" TO fresh')
            con.execute("DETACH fresh")
            con.close()  # before the fresh file takes the old one's name
    return Compaction(before, path.stat().st_size, share, rewritten=True)
