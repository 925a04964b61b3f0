"""A store's rows as Parquet files, and back: what a shard checkpoints and publishes.

Parquet, not the DuckDB file: a 104-rollout shard is about 60 KB as Parquet against 4.2 MB as
a DuckDB file, and any DuckDB (or Arrow) version reads it. A snapshot holds every row of the
small keyed tables and the evidence (rollouts, model calls, verifications) of the rollouts not
in `skip`, read in one transaction: a rollout is committed whole (`store/writer.py`), so a
snapshot never holds half of one. Loading is the merge's copy (`store/merge.py`): idempotent,
and a rollout already present keeps its rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gymflow.store.db import transaction
from gymflow.store.merge import EVIDENCE_TABLES, KEYED_TABLES, REFERRED_TABLES, copy_rows

#: Every table a snapshot holds.
SNAPSHOT_TABLES = KEYED_TABLES + REFERRED_TABLES + EVIDENCE_TABLES


@dataclass(frozen=True)
class Snapshot:
    """Parquet files written by `export`: one per table, and the rollouts they hold."""

    files: dict[str, Path]
    rollout_ids: tuple[str, ...]
    failed: int


def _quote(path: Path) -> str:
    return str(path).replace("'", "''")


def export(con, folder: Path, *, skip: Iterable[str] = ()) -> Snapshot:
    """Write the store's rows into `folder` as Parquet, leaving out the rollouts in `skip`
    (those an earlier snapshot holds) and their model calls and verifications."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {table: folder / f"{table}.parquet" for table in SNAPSHOT_TABLES}
    with transaction(con):  # one snapshot of the store: the writer may commit meanwhile
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE snapshot_ids AS
            SELECT r.rollout_id, r.status FROM rollouts r
            ANTI JOIN (SELECT unnest($1::VARCHAR[]) AS rollout_id) s USING (rollout_id)
            """,
            [list(skip)],
        )
        for table, path in files.items():
            where = (
                "WHERE rollout_id IN (SELECT rollout_id FROM snapshot_ids)"
                if table in EVIDENCE_TABLES
                else ""
            )
            con.execute(
                f"COPY (SELECT * FROM {table} {where}) TO '{_quote(path)}' (FORMAT parquet)"
            )
        ids = tuple(r[0] for r in con.execute("SELECT rollout_id FROM snapshot_ids").fetchall())
        failed = con.execute(
            "SELECT count(*) FROM snapshot_ids WHERE status = 'failed'"
        ).fetchone()[0]
        con.execute("DROP TABLE snapshot_ids")
    return Snapshot(files=files, rollout_ids=ids, failed=failed)


def load(con, files: dict[str, Path]) -> dict[str, int]:
    """Copy a snapshot's Parquet files into the store, in one transaction; returns the rows
    added per table (a rollout already stored keeps its own rows)."""

    def relation(table: str) -> str | None:
        path = files.get(table)
        return None if path is None else f"read_parquet('{_quote(path)}')"

    with transaction(con):
        return copy_rows(con, relation)


def rollout_counts(con, files: dict[str, Path]) -> tuple[int, int]:
    """The rollouts a snapshot's files hold, and how many of them failed."""
    return con.execute(
        "SELECT count(*), count(*) FILTER (WHERE status = 'failed') "
        f"FROM read_parquet('{_quote(files['rollouts'])}')"
    ).fetchone()
