"""Query results as Polars frames."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import polars as pl


def frame(con, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
    """Run `sql` and return its rows as a Polars frame (through Arrow, columns typed by DuckDB).

    Goes through `execute`, not `con.sql`: a relation refuses to run while an earlier `execute`
    result on the connection is unfinished, which callers' `fetchone()` routinely leaves."""
    result = con.execute(sql, params or [])
    with warnings.catch_warnings():
        # DuckDB notes the extra Arrow copy a DB-API result costs; these frames are aggregates.
        warnings.simplefilter("ignore", UserWarning)
        return pl.from_arrow(result.to_arrow_table())
