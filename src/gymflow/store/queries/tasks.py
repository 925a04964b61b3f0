"""Questions about a store's copy of its tasks."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row

#: A stored task as a verifier reads it: id, the row's JSON, reference, tags and difficulty.
StoredTask = tuple[str, str | None, str | None, list[str] | None, str | None]


def stored_tasks(con: Connection) -> list[StoredTask]:
    """Every stored task, by task id."""
    return con.execute(
        "SELECT task_id, data_json, reference, tags, difficulty FROM tasks ORDER BY task_id"
    ).fetchall()


def task_count(con: Connection) -> int:
    """How many tasks the store holds."""
    return one_row(con, "SELECT count(*) FROM tasks")[0]
