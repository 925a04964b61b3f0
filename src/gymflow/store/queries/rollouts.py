"""Questions about a store's rollouts: how many are stored, which, and how many of a plan's
(task, repeat) pairs are held or failed."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row


def stored_count(con: Connection) -> int:
    """How many rollouts the store holds."""
    return one_row(con, "SELECT count(*) FROM rollouts")[0]


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
