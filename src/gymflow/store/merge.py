"""Merging shard stores into a run store: idempotent, all-or-nothing, refusing foreign shards.

Rollout ids are deterministic (`records.rollout_id(run_id, task_id, repeat)`), so a rollout met
twice (a shard merged twice, two overlapping shards) is the same row and `INSERT OR IGNORE` keeps
one. Every shard is checked before the destination is touched, and the copy is one transaction:
a refused shard changes nothing. What the run expects (its tasks' rows and rollout keys) comes
from the caller, which resolves the run's stored config (`rollouts/merge.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import duckdb

from gymflow.core.errors import GymflowError
from gymflow.store.db import (
    StoreError,
    StoreFailure,
    connect,
    copy_data,
    refuse_other_wal,
    store_path,
    transaction,
)
from gymflow.store.generations import (
    GENERATION_KEY,
    fresh_history,
    read_generation,
    recorded_store_at,
)
from gymflow.store.handle import one_row
from gymflow.store.runs import RolloutKey, RunInfo, check_run_store, missing_keys, run_info
from gymflow.store.schema import SPECS
from gymflow.store.seal import StoreSeal, claim, foreign_key_message, older_state, seal_tasks
from gymflow.store.seal_key import SealKey, SealKeyError, load_key
from gymflow.store.sealed_first import check_before_writing
from gymflow.store.sealed_rows import seal_rows
from gymflow.store.store_ids import stored_store_id
from gymflow.store.writer import insert_rows

#: Tables copied from shards, in order. Keyed tables take `INSERT OR IGNORE`; `model_calls` has no
#: key, so its rows are copied only for rollouts the destination does not hold yet, which is why
#: it comes before `rollouts`. Derived tables (health, profile, ...) are recomputed, not merged.
KEYED_TABLES = ("runs", "shards", "tasks", "verifier_versions")
EVIDENCE_TABLES = ("model_calls", "rollouts", "verifications")

#: Copied too (keyed, `INSERT OR IGNORE`), but not counted: the model calls' tool lists.
REFERRED_TABLES = ("tool_lists",)

#: The identity every shard of one run shares; a difference means another run.
IDENTITY = ("run_id", "config_hash", "benchmark_version", "dataset_version", "repeats")


@dataclass(frozen=True)
class ShardInfo:
    """A shard store as checked: `path` where it was found, `snapshot` the private copy of it
    that was checked and is the one merged."""

    path: Path
    run: RunInfo
    indices: tuple[int, ...]
    rollouts: int
    snapshot: Path


@dataclass(frozen=True)
class MergeReport:
    """What a merge did and what is still missing: the aggregate step's typed result."""

    run_id: str
    run_dir: Path
    shard_count: int
    merged: list[ShardInfo]
    added: dict[str, int]
    expected: int
    stored: int
    shards_present: list[int]
    missing: list[RolloutKey] = field(default_factory=list)

    @property
    def shards_missing(self) -> list[int]:
        return sorted(set(range(self.shard_count)) - set(self.shards_present))

    @property
    def complete(self) -> bool:
        return not self.missing

    def as_dict(self, max_missing: int = 50) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "shard_count": self.shard_count,
            "shards_present": self.shards_present,
            "shards_missing": self.shards_missing,
            "merged": [
                {"path": str(s.path), "shards": list(s.indices), "rollouts": s.rollouts}
                for s in self.merged
            ],
            "added": self.added,
            "expected": self.expected,
            "stored": self.stored,
            "missing_count": len(self.missing),
            "missing": [list(key) for key in self.missing[:max_missing]],
        }


def snapshot(path: Path | str, folder: Path) -> Path:
    """The shard store at `path` (with its write-ahead log) copied, as it is now, into
    `folder`, a private folder of the merge's. A shard's folder is anyone's: a store checked at
    its path and attached again by that path later could be another file by then (a view put
    in its place ran its SQL in the merge: the seal key read into the run store, attack pass
    4). The merge checks and copies the snapshot, which nobody else can write."""
    source = store_path(path)
    if not source.is_file():
        raise StoreError(f"{source}: no gymflow store here")
    refuse_other_wal(source)
    target = folder / f"shard-{len(list(folder.glob('*.duckdb')))}.duckdb"
    copy_data(source, target)
    wal = source.with_name(source.name + ".wal")
    if wal.exists():
        copy_data(wal, target.with_name(target.name + ".wal"))
    return target


def read_shard(path: Path | str, folder: Path) -> ShardInfo:
    """Snapshot a shard store into `folder` (`snapshot`), open the snapshot read-only, check
    it and read its run identity. A refusal names the shard the user gave, not its snapshot."""
    copy = snapshot(path, folder)
    try:
        con = connect(copy, read_only=True)
        try:
            return _checked_shard(con, store_path(path), copy)
        finally:
            con.close()
    except GymflowError as exc:
        text = str(exc).replace(str(copy), str(store_path(path)))
        if text == str(exc):
            raise
        raise type(exc)(text) from None


def _checked_shard(con: duckdb.DuckDBPyConnection, path: Path, copy: Path) -> ShardInfo:
    run = run_info(con)
    runs: int = one_row(con, "SELECT count(DISTINCT run_id) FROM runs")[0]
    if runs != 1:
        raise StoreError(f"{path}: holds {runs} runs; a shard store holds one")
    indices = tuple(
        r[0] for r in con.execute("SELECT shard_index FROM shards ORDER BY 1").fetchall()
    )
    rollouts: int = one_row(con, "SELECT count(*) FROM rollouts")[0]
    # its rows would be sealed into the merged store as they are: checked first
    _check_shard_key(con, "main", path, load_key(create=False))
    checked = check_before_writing(con, f"{path}: refused")
    if checked:
        _check_shard_generation(con, path, load_key(create=False))
    verdicts: int = one_row(con, "SELECT count(*) FROM verifications")[0]
    if not checked and (rollouts or verdicts):
        # A store gymflow writes is sealed from its first row; one that reads as unsealed had
        # its seals removed somewhere this machine's ledger does not know of (another path,
        # another machine's worker), and its verdicts cannot be vouched for.
        raise StoreError(
            f"{path}: refused: its verdicts are not sealed by this machine's key, so nothing "
            "vouches for them; a shard gymflow writes is sealed"
        )
    return ShardInfo(path=path, run=run, indices=indices, rollouts=rollouts, snapshot=copy)


def _check_shard_generation(
    con: duckdb.DuckDBPyConnection, shard: Path, key: SealKey | None
) -> None:
    """A shard put back to an older sealed state of itself, or another store put at its path,
    is refused: its snapshot is checked at a private path, so its generation and id are compared
    with those recorded for the shard's own (`generations.py`, `store_ids.py`)."""
    if key is None:
        return
    at_path = recorded_store_at(key, shard)
    found = StoreSeal(
        "sealed",
        key.key_id,
        generation=read_generation(con, key).number,
        generation_recorded=at_path.number,
        store_id=stored_store_id(con),
        store_ids_recorded=at_path.store_ids,
    )
    if found.rolled_back:
        raise StoreError(f"{shard}: refused: {older_state(found)}; nothing merged")


def check_identity(reference: RunInfo, shard: ShardInfo, reference_name: str) -> None:
    for key in IDENTITY:
        theirs, ours = getattr(shard.run, key), getattr(reference, key)
        if theirs != ours:
            raise StoreError(
                f"{shard.path.parent}: refused: its {key} is {theirs!r}, but "
                f"{reference_name} has {ours!r}; a shard of another run (or another "
                "config or benchmark version) cannot be merged"
            )


def _destination_run(destination: Path) -> RunInfo | None:
    if not destination.exists():
        return None
    con = connect(destination, read_only=True)
    try:
        return (
            None if con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0 else run_info(con)
        )
    finally:
        con.close()


def read_shards(run_dir: Path | str, shard_dirs: list[Path | str], folder: Path) -> list[ShardInfo]:
    """Snapshot every shard into the private `folder` and check it is a shard of one run, the
    run `run_dir` holds (if it holds one), and not `run_dir` itself; nothing is written."""
    if not shard_dirs:
        raise StoreError("no shard stores given")
    shards = [read_shard(path, folder) for path in shard_dirs]
    reference = shards[0].run
    for shard in shards[1:]:
        check_identity(reference, shard, str(shards[0].path.parent))
    destination = store_path(run_dir)
    existing = _destination_run(destination)
    if existing is not None:
        for shard in shards:
            check_identity(existing, shard, f"the run store {destination.parent}")
    for shard in shards:
        if shard.path.resolve() == destination.resolve():
            raise StoreError(f"{shard.path.parent}: is the destination itself")
    return shards


def merge_into(
    run_dir: Path | str,
    shards: list[ShardInfo],
    *,
    run_id: str,
    shard_count: int,
    task_rows: list[tuple[Any, ...]],
    keys: list[RolloutKey],
) -> MergeReport:
    """Copy checked `shards` (`read_shards`) into the store at `run_dir` with every task's row
    (`task_rows`: the whole run's, not only the shards' present), then count which of the run's
    rollout `keys` are still missing.

    A destination holding rows (in any table) that this machine's key did not seal is refused:
    the copy keeps a row already there over the shard's (`INSERT OR IGNORE`), and sealing the
    store would make them its own, or an older gymflow's unsealed verdicts, a warning only. A
    store planted at `--out` before the merge read pass@1 0.917 for the shards' 0.75 (its
    rollouts and verdicts), 1.0 (its verdicts alone, no rollout), or named a forged model and
    task tags (its run and task rows), healthy each time (attack pass 16). The shards hold every
    row, so nothing is lost by merging into a new folder."""
    where = str(store_path(run_dir))
    con = connect(run_dir, create=True)
    try:
        if not check_before_writing(con, where) and _holds_rows(con):
            raise StoreError(
                f"{where}: already holds rows this machine's seal key did not seal (an older "
                "gymflow's, or someone else's), which the merge would keep over the shards' "
                "own; nothing merged: aggregate into a new folder (--out), the shards hold "
                "every row"
            )
        added = _copy(con, shards, task_rows, str(run_dir))
        return MergeReport(
            run_id=run_id,
            run_dir=Path(run_dir),
            shard_count=shard_count,
            merged=shards,
            added=added,
            expected=len(keys),
            stored=con.execute("SELECT count(*) FROM rollouts").fetchone()[0],
            shards_present=[
                r[0] for r in con.execute("SELECT shard_index FROM shards ORDER BY 1").fetchall()
            ],
            missing=missing_keys(con, run_id, keys),
        )
    finally:
        con.close()


def _copy(
    con: duckdb.DuckDBPyConnection,
    shards: list[ShardInfo],
    task_rows: list[tuple[Any, ...]],
    where: str,
) -> dict[str, int]:
    """The shards' rows, the run's tasks and the seal over them, in one transaction: a merge
    killed anywhere leaves the store as it was, never rows whose seal was not yet written (which
    the next merge would refuse as edited)."""
    added = dict.fromkeys(KEYED_TABLES + EVIDENCE_TABLES, 0)
    aliases = [f"shard_{i}" for i in range(len(shards))]
    try:
        for alias, shard in zip(aliases, shards, strict=True):
            con.execute(f"ATTACH '{_quote(shard.snapshot)}' AS {alias} (READ_ONLY)")
    except duckdb.Error as exc:
        _detach(con, aliases)
        raise StoreFailure(f"cannot attach a shard store read-only: {exc}") from None
    try:
        with transaction(con):
            for alias in aliases:

                def relation(table: str, alias: str = alias) -> str | None:
                    # a shard written before a referred table existed has none
                    present = table not in REFERRED_TABLES or _has_table(con, alias, table)
                    return f"{alias}.{table}" if present else None

                for table, n in copy_rows(con, relation).items():
                    added[table] += n
            insert_rows(con, "tasks", task_rows, on_conflict_ignore=True)
            seal_tasks(con, claim(con, where))
    finally:
        _detach(con, aliases)
    return added


def copy_rows(con, relation: Callable[[str], str | None]) -> dict[str, int]:
    """Copy one source's rows into the store `con` (inside the caller's transaction):
    `relation(table)` is the SQL relation holding that table's rows (an attached store's table,
    a Parquet file), or None where the source has none. Returns the rows added per table."""
    added = {}
    store = cast(duckdb.DuckDBPyConnection, con)
    # A store that holds nothing yet (made for this copy: a merge into a new folder, a shard's
    # checkpoints restored) is a new store at its path: its generation starts above a deleted
    # store's there, which then reads as put back (`generations.py`). One that holds rows or a
    # record is not: an older copy put back, its records removed, is still refused as one.
    if _holds_nothing(store):
        fresh_history(store)
    for table in KEYED_TABLES:
        added[table] = _insert(con, table, f"SELECT * FROM {relation(table)}")
    for table in REFERRED_TABLES:
        if (source := relation(table)) is not None:
            _insert(con, table, f"SELECT * FROM {source}")
    added["model_calls"] = _insert(
        con,
        "model_calls",
        f"SELECT * FROM {relation('model_calls')} m "
        "WHERE m.rollout_id NOT IN (SELECT rollout_id FROM main.rollouts)",
    )
    unsealed = "SELECT count(*) FROM main.verifications WHERE seal IS NULL"
    before = con.execute(unsealed).fetchone()[0]
    for table in ("rollouts", "verifications"):
        added[table] = _insert(con, table, f"SELECT * FROM {relation(table)}")
    # The verdicts keep the seals their writer gave them (what they cover travels with them);
    # a shard's from before the seal come in unsealed, and are counted as such, not tampered.
    claim(con, "run store", legacy_added=con.execute(unsealed).fetchone()[0] - before)
    # every rollout and model call as merged (the shards' records cover their own), with the
    # key just claimed
    seal_rows(store, claim(store, "run store"))
    return added


def _holds_rows(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether any of gymflow's tables but `meta` (a new store's schema records) holds a row."""
    tables = [spec.name for spec in SPECS if spec.name != "meta"]
    return one_row(con, "SELECT " + " OR ".join(f"EXISTS (FROM main.{t})" for t in tables))[0]


def _holds_nothing(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store holds no rollout, no verdict and no seal or generation record."""
    return one_row(
        con,
        "SELECT NOT EXISTS (FROM main.rollouts) AND NOT EXISTS (FROM main.verifications) "
        "AND NOT EXISTS (FROM main.meta WHERE list_contains(?, key))",
        [["seal", GENERATION_KEY]],
    )[0]


def _check_shard_key(con, alias: str, shard: Path, key: SealKey | None) -> None:
    """A shard sealed with another key than this machine's is refused before anything is
    copied: its seals could not be checked here, and merged they would read as tampered."""
    row = con.execute(f"SELECT value FROM {alias}.meta WHERE key = 'seal'").fetchone()
    key_id = None if row is None else str(row[0]).partition(":")[0]
    if key_id is not None and (key is None or key_id != key.key_id):
        raise SealKeyError(
            foreign_key_message(f"{shard.parent}: refused", key_id, key) + "; nothing merged"
        )


def _has_table(con, alias: str, table: str) -> bool:
    return (
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = ?",
            [alias, table],
        ).fetchone()[0]
        > 0
    )


def _insert(con, table: str, select: str) -> int:
    before = con.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
    verb = "INSERT" if table == "model_calls" else "INSERT OR IGNORE"
    con.execute(f"{verb} INTO main.{table} BY NAME {select}")
    return con.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0] - before


def _detach(con, aliases: list[str]) -> None:
    attached = {
        row[0] for row in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
    }
    for alias in aliases:
        if alias in attached:
            con.execute(f"DETACH {alias}")


def _quote(path: Path) -> str:
    return str(path).replace("'", "''")


@dataclass(frozen=True)
class ShardProgress:
    """How much of a plan (one shard's) its store holds; `error` if the store cannot be read."""

    index: int
    count: int
    store: str
    expected: int
    stored: int
    error: str | None = None
    #: Stored rollouts that failed: a shard whose every rollout failed (a worker that cannot
    #: reach the model) is not complete, however many it stored.
    failed: int = 0

    @property
    def complete(self) -> bool:
        all_failed = self.expected > 0 and self.failed >= self.stored
        return self.error is None and self.stored >= self.expected and not all_failed


def stored_progress(
    run_dir: Path | str, run_id: str, keys: list[RolloutKey], index: int, count: int
) -> ShardProgress:
    """How many of a shard's rollout `keys` the store at `run_dir` holds (read-only): the store,
    not Prefect, says what is done."""
    expected = len(keys)
    progress = ShardProgress(index, count, str(run_dir), expected, 0)
    if not store_path(run_dir).exists():
        return progress
    try:
        con = connect(run_dir, read_only=True)
    except (StoreError, StoreFailure) as exc:  # a shard store not a store, or held by a writer
        return replace(progress, error=str(exc))
    try:
        stored = expected - len(missing_keys(con, run_id, keys))
        failed = con.execute(
            "SELECT count(*) FROM rollouts WHERE run_id = ? AND status = 'failed'", [run_id]
        ).fetchone()[0]
    finally:
        con.close()
    return replace(progress, stored=stored, failed=failed)


def check_destination(
    run_dir: Path | str, run_id: str, *, resume: bool, benchmark_version: str | None = None
) -> None:
    """Before a run starts: the rules `register_run` applies (`check_run_store`), read-only, so
    a refused or unreadable store is reported before anything is started or written."""
    destination = store_path(run_dir)
    if not destination.exists():
        return
    con = connect(destination, read_only=True)
    try:
        check_run_store(
            con, destination.parent, run_id, resume=resume, benchmark_version=benchmark_version
        )
    finally:
        con.close()
