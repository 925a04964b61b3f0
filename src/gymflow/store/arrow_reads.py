"""Reading a store's rows as Arrow batches, streamed: what the seal checks outside SQL reads.

Apart from `db` because the seal reads through it, and opening a store (`db`) checks seals."""

from __future__ import annotations

from typing import Any

import pyarrow  # pyright: ignore[reportMissingTypeStubs]
import pyarrow.compute  # pyright: ignore[reportMissingTypeStubs]
from duckdb import DuckDBPyConnection

from gymflow.store.memory_bound import VECTOR_ROWS

#: pyarrow has no type stubs: its values cross this module as `Any`.
pa: Any = pyarrow
pc: Any = pyarrow.compute


def arrow_batches(
    con: DuckDBPyConnection, sql: str, params: Any = None, size: int = VECTOR_ROWS
) -> Any:
    """The rows of `sql` as Arrow record batches streamed `size` at a time (the seal reads every
    verdict's message this way): one DuckDB vector a batch unless told, whose text the open
    bounds (`memory_bound.check_text_at_once`). Through the relation API:
    `execute(...).to_arrow_reader()` materialises the whole result first (1.15 GiB for 1M
    verdicts' messages, against 0.5 GiB for the check in SQL). The relation API refuses to run
    while an earlier `execute` result of the connection is unfinished (every one-row
    `fetchone()` leaves one), so one trivial statement, fetched whole, finishes it first. A
    `pyarrow.RecordBatchReader` (`Any`: pyarrow has no type stubs)."""
    con.execute("SELECT 1").fetchall()
    return con.sql(sql, params=params or None).to_arrow_reader(size)


def joined_strings(chunks: list[Any]) -> Any:
    """String arrays (rollout ids) as one `pyarrow.StringArray`, empty for no chunks. Not
    `pa.chunked_array(chunks, pa.string()).combine_chunks()`: with no chunks, pyarrow imports
    pandas for it (0.4 s, half of a small run's analysis, on every read of a checked store)."""
    return pa.concat_arrays(chunks) if chunks else pa.nulls(0, pa.string())
