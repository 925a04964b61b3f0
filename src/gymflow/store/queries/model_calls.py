"""Questions about a store's model calls."""

from __future__ import annotations

from gymflow.store.handle import Connection, one_row


def answered_by(con: Connection, model: str, sample: int) -> tuple[int, int]:
    """Among at most `sample` answered calls (completed, with a response), how many there are
    and how many of them name `model` in the response's `model` field."""
    answered, said = one_row(
        con,
        f"""
        SELECT count(*), count(*) FILTER (WHERE json_extract_string(response_json, '$.model') = ?)
        FROM (SELECT response_json FROM model_calls
              WHERE status = 'completed' AND response_json IS NOT NULL LIMIT {int(sample)})
        """,
        [model],
    )
    return answered, said


def repeated_calls(con: Connection, examples: int) -> tuple[int, list[str]]:
    """How many (rollout_id, call_index, attempt) identities more than one model call holds,
    and up to `examples` of their rollout ids: no gymflow writer stores two (health's
    `duplicate_identity`), and two copies of one sealed call cancel in a seal record of an
    earlier gymflow (`store/sealed_rows.py`)."""
    rows = con.execute(
        """
        SELECT rollout_id FROM model_calls
        GROUP BY rollout_id, call_index, attempt HAVING count(*) > 1
        ORDER BY rollout_id
        """
    ).fetchall()
    return len(rows), [str(row[0]) for row in rows[:examples]]
