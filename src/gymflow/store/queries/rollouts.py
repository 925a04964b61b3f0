"""Questions about a store's rollouts: how many are stored, which, and how many of a plan's
(task, repeat) pairs are held or failed."""

from __future__ import annotations

from typing import Any

from gymflow.store.handle import Connection, one_row


def stored_count(con: Connection) -> int:
    """How many rollouts the store holds."""
    return one_row(con, "SELECT count(*) FROM rollouts")[0]


def stored_and_expected(con: Connection) -> tuple[int, int]:
    """How many rollouts the store holds, and how many its plan expects (its tasks times the
    run's repeats)."""
    stored, expected = one_row(
        con,
        "SELECT (SELECT count(*) FROM rollouts), "
        "(SELECT count(*) FROM tasks) * coalesce((SELECT max(repeats) FROM runs), 0)",
    )
    return stored, expected


def stored_ids(con: Connection) -> set[str]:
    """The ids of every stored rollout."""
    return {row[0] for row in con.execute("SELECT rollout_id FROM rollouts").fetchall()}


def held_and_failed(con: Connection) -> tuple[int, int]:
    """How many distinct (task_id, repeat_index) pairs the store holds, and how many of them
    did not complete."""
    stored, failed = one_row(
        con,
        "SELECT count(DISTINCT (task_id, repeat_index)), "
        "count(DISTINCT (task_id, repeat_index)) FILTER (WHERE status <> 'completed') "
        "FROM rollouts",
    )
    return stored, failed


def usage_summary(con: Connection, columns: tuple[str, ...]) -> tuple[Any, ...]:
    """For each rollout column in turn: its mean, its [p50, p90, p99] and its max (a DOUBLE),
    over every stored rollout, in one row."""
    parts = [
        f"avg({column}), quantile_cont({column}, [0.5, 0.9, 0.99]), max({column})::DOUBLE"
        for column in columns
    ]
    return one_row(con, f"SELECT {', '.join(parts)} FROM rollouts")


def failing_rollouts(
    con: Connection, verifier_version: str, task_id: str, limit: int
) -> list[tuple[Any, ...]]:
    """At most `limit` rollouts of `task_id` that did not pass under `verifier_version`, by
    repeat: rollout_id, repeat_index, status, failure kind (the rollout's or else the
    verdict's) and reward."""
    return con.execute(
        """
        SELECT r.rollout_id, r.repeat_index, r.status, coalesce(r.failure_kind, v.failure_kind),
               v.reward
        FROM rollouts r
        LEFT JOIN verifications v ON v.rollout_id = r.rollout_id AND v.verifier_version = ?
        WHERE r.task_id = ? AND NOT coalesce(v.passed, FALSE)
        ORDER BY r.repeat_index LIMIT ?
        """,
        [verifier_version, task_id, limit],
    ).fetchall()


def health_verdicts_sql(hits: str, *, unhealthy_only: bool, limit: int | None) -> str:
    """SQL for each rollout's health verdict, by task, repeat and id: rollout_id, task_id,
    repeat_index, healthy, checks (the names of the checks it failed, sorted), from the temp
    table `hits` (id, check_name) the health checks filled; only the unhealthy ones with
    `unhealthy_only`, at most `limit`."""
    join = "JOIN" if unhealthy_only else "LEFT JOIN"
    limit_sql = f"LIMIT {int(limit)}" if limit is not None else ""
    return f"""
        SELECT r.rollout_id, r.task_id, r.repeat_index,
               h.checks IS NULL AS healthy,
               coalesce(h.checks, []::VARCHAR[]) AS checks
        FROM rollouts r
        {join} (
            SELECT id, list(DISTINCT check_name ORDER BY check_name) AS checks
            FROM {hits} GROUP BY id
        ) h ON h.id = r.rollout_id
        ORDER BY r.task_id, r.repeat_index, r.rollout_id
        {limit_sql}
        """
