"""Writing a query's single text column as the lines of a file, in batches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

BATCH = 50_000


def write_lines(con, sql: str, params: Sequence[Any], path: Path) -> int:
    """Write each row of `sql` (one VARCHAR column, e.g. a JSON object) as a line; returns rows.

    DuckDB's own JSON writer wants fixed columns; a NeMo Gym row keeps the dataset's fields at
    its top level, which differ from row to row, so each row is built as JSON text in SQL."""
    rows = 0
    cursor = con.execute(sql, list(params))
    with path.open("w", encoding="utf-8") as handle:
        while batch := cursor.fetchmany(BATCH):
            handle.write("\n".join(value for (value,) in batch) + "\n")
            rows += len(batch)
    return rows
