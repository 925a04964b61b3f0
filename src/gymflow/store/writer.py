"""Bulk writers. Rows go in as column lists through `unnest`, which is ~75x faster in DuckDB than
`executemany` (measured: 20,000 rows in 0.2 s against 15 s) and needs no Arrow round trip."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb
import orjson

from gymflow.core.records import Rollout
from gymflow.store.db import StoreError, transaction
from gymflow.store.schema import COLUMNS


def _dumps(value: Any) -> str:
    """Compact JSON, as `json.dumps(separators=(",", ":"), ensure_ascii=False, default=str)` gives
    it, at a tenth of the cost: trajectories and model calls are most of a flush's work."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:  # integers beyond 64 bits, which untrusted output may hold
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def insert_rows(
    con, table: str, rows: Sequence[Sequence[Any]], *, on_conflict_ignore: bool = False
) -> None:
    """Insert row tuples, in `COLUMNS[table]` order, as one statement."""
    if not rows:
        return
    columns = COLUMNS[table]
    lists = [list(column) for column in zip(*rows, strict=True)]
    selects = ", ".join(f"unnest(${i + 1})" for i in range(len(columns)))
    verb = "INSERT OR IGNORE" if on_conflict_ignore else "INSERT"
    con.execute(f"{verb} INTO {table} ({', '.join(columns)}) SELECT {selects}", lists)


def write_rollouts(con, rollouts: Iterable[Rollout]) -> int:
    """Commit finished rollouts with their model calls and verifications in one transaction.

    A rollout is stored whole or not at all, so a kill between batches loses only unflushed work,
    which `--resume` then redoes."""
    rollout_rows, call_rows, verification_rows = [], [], []
    now = datetime.now(UTC).replace(tzinfo=None)
    for r in rollouts:
        rollout_rows.append(
            (
                r.rollout_id,
                r.run_id,
                r.task_id,
                r.repeat_index,
                r.seed,
                r.status,
                r.failure_kind,
                r.error,
                r.incomplete,
                r.output_text,
                _dumps(r.trajectory),
                r.num_turns,
                len(r.calls),
                r.input_tokens,
                r.output_tokens,
                (r.finished_at - r.started_at).total_seconds(),
                r.started_at.replace(tzinfo=None),
                r.finished_at.replace(tzinfo=None),
                _dumps(r.counters),
            )
        )
        for c in r.calls:
            call_rows.append(
                (
                    r.rollout_id,
                    c.call_index,
                    c.attempt,
                    c.status,
                    c.failure_kind,
                    c.http_status,
                    c.latency_s,
                    c.input_tokens,
                    c.cached_tokens,
                    c.output_tokens,
                    c.reasoning_tokens,
                    _dumps(c.sampling),
                    _dumps(c.request),
                    c.response if isinstance(c.response, str) else _dumps(c.response),
                    c.error,
                )
            )
        v = r.verification
        if v is not None:
            verification_rows.append(
                (
                    r.rollout_id,
                    v.verifier_version,
                    v.status,
                    v.reward,
                    v.passed,
                    v.failure_kind,
                    _dumps(v.details),
                    now,
                )
            )
    if not rollout_rows:
        return 0
    try:
        with transaction(con):
            insert_rows(con, "rollouts", rollout_rows)
            insert_rows(con, "model_calls", call_rows)
            insert_rows(con, "verifications", verification_rows)
    except Exception as exc:
        if isinstance(
            exc, duckdb.IOException | duckdb.FatalException | duckdb.TransactionException
        ):
            raise StoreError(
                f"{_database_path(con)}: cannot commit {len(rollout_rows)} rollouts (disk full "
                f"or file size limit?); rollouts committed before are kept and `--resume` redoes "
                f"the rest. {type(exc).__name__}: {exc}"
            ) from exc
        raise
    return len(rollout_rows)


def _database_path(con) -> str:
    try:
        row = con.execute(
            "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()
    except duckdb.Error:  # an invalidated database answers nothing
        return "run store"
    return row[0] if row and row[0] else "run store"


def register_verifier_version(
    con,
    version: str,
    name: str,
    params: dict[str, Any],
    source: str = "gymflow",
    code_hash: str | None = None,
) -> None:
    """Record a verifier version; `code_hash` (`verifiers.base.code_hash`) says which code ran
    it, so a reverify can tell when the verifier changed under the same parameters."""
    con.execute(
        "INSERT OR IGNORE INTO verifier_versions "
        "(verifier_version, verifier_name, params_json, source, created_at, code_hash) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [version, name, _dumps(params), source, datetime.now(UTC).replace(tzinfo=None), code_hash],
    )
