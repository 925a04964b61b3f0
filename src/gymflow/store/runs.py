"""Run metadata in the store: recording a run's rows and reading them back. The rows come
from the caller (a plan's, `rollouts/registration.py`): the store resolves no configs."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from gymflow.core.errors import GymflowError, option
from gymflow.store.db import StoreError, connect, store_path, transaction
from gymflow.store.generations import recorded_elsewhere, recorded_store_at
from gymflow.store.handle import Connection, one_row
from gymflow.store.named_paths import path_names
from gymflow.store.schema import COLUMNS
from gymflow.store.seal import claim, seal_tasks
from gymflow.store.seal_key import load_key
from gymflow.store.sealed_first import SealsBroken, check_before_writing
from gymflow.store.store_ids import stored_store_id
from gymflow.store.writer import insert_rows

#: A rollout's place in its run: (task_id, repeat_index).
RolloutKey = tuple[str, int]


def check_run_store(
    con: duckdb.DuckDBPyConnection,
    run_dir: Path | str,
    run_id: str,
    *,
    resume: bool,
    benchmark_version: str | None = None,
) -> None:
    """A store holds one run: another config is refused, and so are this run's stored rollouts
    unless resuming (so a second `gym eval run` never silently mixes into the first), and so is
    the same config over another benchmark version (a dataset file that changed since)."""
    stored = dict(con.execute("SELECT run_id, benchmark_version FROM runs").fetchall())
    if stored and run_id not in stored:
        raise StoreError(
            f"{run_dir}: holds run {sorted(stored)[0]}, but this config is run {run_id}; "
            f"choose another run folder ({option('out')}) for a different config"
        )
    if benchmark_version is not None and stored.get(run_id, benchmark_version) != (
        benchmark_version
    ):
        raise StoreError(
            f"{run_dir}: holds run {run_id} on benchmark version {stored[run_id]}, but the "
            f"benchmark is now version {benchmark_version} (its dataset or protocol changed); "
            f"choose another run folder ({option('out')})"
        )
    if not resume and one_row(con, "SELECT count(*) FROM rollouts")[0] > 0:
        raise StoreError(
            f"{run_dir}: already holds rollouts of this run; continue it ({option('resume')}) "
            f"or choose another run folder ({option('out')})"
        )
    if resume:
        _collected_here(con, run_dir)


def _collected_here(con: duckdb.DuckDBPyConnection, run_dir: Path | str) -> None:
    """A store continued at `run_dir` is the one this machine's writers left there, or one they
    never recorded (a store moved here, a retry on another worker of a pool): a copy of a run
    that is still where it was collected is refused. Continued, the copy of last night's store
    put at tonight's `--out` before the nightly run read as tonight's run, no model called, its
    path then recorded as the run's (attacker's pass 9, A4)."""
    key, held = load_key(create=False), stored_store_id(con)
    store = store_path(run_dir)
    if key is None or held is None or recorded_store_at(key, store).store_ids:
        return  # the path's own record decides (the open's `another_store`)
    for elsewhere in recorded_elsewhere(key, held, path_names(store)):
        if _store_id_at(elsewhere) == held:
            raise SealsBroken(
                f"{run_dir}: not continued: it holds the store collected at {elsewhere} (store "
                f"id {held}), which is still there: a copy, not a run this machine collected "
                f"here; collect into another run folder ({option('out')}), or move the copy "
                "away; nothing was written"
            )


def _store_id_at(path: str) -> str | None:
    """The id of the store at `path` (None: none there, or it cannot be read)."""
    if not os.path.isfile(path):
        return None
    try:
        with connect(path, read_only=True) as other:
            return stored_store_id(other)
    except (GymflowError, duckdb.Error):
        return None


def record_run(
    con: duckdb.DuckDBPyConnection,
    run_dir: Path | str,
    *,
    run: tuple[Any, ...],
    shard: tuple[Any, ...],
    tasks: list[tuple[Any, ...]],
    verifier_version: tuple[Any, ...],
    resume: bool,
) -> None:
    """Record a run's rows (`store/rows.py`): its `runs` row, its shard, its shard's tasks and
    its verifier version, after `check_run_store`."""
    check_run_store(
        con,
        run_dir,
        run[COLUMNS["runs"].index("run_id")],
        resume=resume,
        benchmark_version=run[COLUMNS["runs"].index("benchmark_version")],
    )
    # a store sealed with another key is refused before a model is called, not at the first
    # batch's commit (store/seal.py: one store, one key); a resumed store whose verdicts or
    # inputs were edited before the new rollouts are sealed beside them (store/sealed_first.py)
    check_before_writing(con, str(store_path(run_dir)))
    # the rows and their seal in one transaction: a writer killed between them would leave
    # inputs that read as edited, and every later writer would refuse the store
    with transaction(con):
        key = claim(con, str(store_path(run_dir)))
        insert_rows(con, "runs", [run], on_conflict_ignore=True)
        insert_rows(con, "shards", [shard], on_conflict_ignore=True)
        insert_rows(con, "tasks", tasks, on_conflict_ignore=True)
        insert_rows(con, "verifier_versions", [verifier_version], on_conflict_ignore=True)
        seal_tasks(con, key)


def missing_keys(con, run_id: str, wanted: list[RolloutKey]) -> list[RolloutKey]:
    """The `wanted` (task_id, repeat_index) pairs with no stored rollout, in their order.

    Only the wanted pairs are looked up: a batch of a long run must not read back every key the
    run holds (each batch of a million-rollout run would otherwise load a million keys)."""
    if not wanted:
        return []
    task_ids, repeats = zip(*wanted, strict=True)
    stored = con.execute(
        """
        SELECT k.task_id, k.repeat_index
        FROM (SELECT unnest($1) AS task_id, unnest($2) AS repeat_index) k
        SEMI JOIN rollouts r
          ON r.run_id = $3 AND r.task_id = k.task_id AND r.repeat_index = k.repeat_index
        """,
        [list(task_ids), list(repeats), run_id],
    ).fetchall()
    found = set(stored)
    return [key for key in wanted if key not in found]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run's `runs` row: what ran, on which benchmark version, with which model, harness and
    sampling. A run gymflow collected fills every column (`rollouts/registration.py`); an
    imported one may leave the descriptive ones NULL."""

    run_id: str
    created_at: datetime | None
    gymflow_version: str | None
    config_json: str | None
    config_hash: str | None
    benchmark: str | None
    benchmark_version: str | None
    environment: str | None
    dataset_version: str | None
    split: str | None
    model: str | None
    harness: str | None
    prompt_template: str | None
    sampling_json: str | None
    repeats: int | None
    shard_count: int | None
    verifier_version: str | None


_RUN_COLUMNS = ", ".join(f.name for f in fields(RunInfo))


def run_info(con) -> RunInfo:
    """The store's run (a store holds one)."""
    row = con.execute(f"SELECT {_RUN_COLUMNS} FROM runs LIMIT 1").fetchone()
    if row is None:
        raise StoreError("store holds no run")
    return RunInfo(*row)


def has_run(con: Connection) -> bool:
    """Whether the store holds its run's row yet (a shard store before registration does not)."""
    return one_row(con, "SELECT count(*) FROM runs")[0] > 0


def config_json(con: Connection) -> str | None:
    """The run's config as stored (JSON text), or None for a store without a run or a config."""
    row = con.execute("SELECT config_json FROM runs LIMIT 1").fetchone()
    return row[0] if row else None


def max_repeats(con: Connection) -> int | None:
    """The repeats the run asked for (None for a store without a run or a count)."""
    return one_row(con, "SELECT max(repeats) FROM runs")[0]


def judged_version(con: Connection) -> str | None:
    """The verifier version the run was judged under, as its `runs` row names it."""
    row = con.execute("SELECT verifier_version FROM runs LIMIT 1").fetchone()
    return row[0] if row else None


def repeats_and_sampling(con: Connection) -> tuple[int | None, str | None]:
    """(repeats, sampling settings as stored JSON) of the run; (None, None) without a run."""
    repeats, sampling = one_row(con, "SELECT max(repeats), any_value(sampling_json) FROM runs")
    return repeats, sampling
