"""Writing query results to files: a single text column as lines, or a whole query through
DuckDB's COPY; a file that cannot be written is a WriteError naming it. The paths given are
written as they are: callers pass the partials of gymflow.core.written, which renames a selection's
files into place together."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from gymflow.core.written import WriteError

BATCH = 50_000


def write_lines(con, sql: str, params: Sequence[Any], path: Path) -> int:
    """Write each row of `sql` (one VARCHAR column, e.g. a JSON object) as a line; returns rows.

    DuckDB's own JSON writer wants fixed columns; a NeMo Gym row keeps the dataset's fields at
    its top level, which differ from row to row, so each row is built as JSON text in SQL."""
    rows = 0
    cursor = con.execute(sql, list(params))
    with path.open("w", encoding="utf-8") as handle:  # an OSError: gymflow.core.written names it
        while batch := cursor.fetchmany(BATCH):
            handle.write("\n".join(value for (value,) in batch) + "\n")
            rows += len(batch)
    return rows


def copy_to(con, sql: str, path: Path, options: str) -> int:
    """`COPY (sql) TO path (options)`; returns the rows written."""
    target = str(path).replace("'", "''")
    try:
        (rows,) = con.execute(f"COPY ({sql}) TO '{target}' ({options})").fetchone()
    except duckdb.IOException as exc:  # as an OSError on `path`, for gymflow.core.written to name
        raise OSError(0, str(exc).splitlines()[0], str(path)) from None
    return rows


def make_folder(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"{path}: cannot create the folder: {exc.strerror or exc}") from None
    return path
