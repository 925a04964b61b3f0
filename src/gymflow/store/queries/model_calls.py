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
