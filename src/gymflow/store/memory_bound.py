"""The memory a read of a store may take, stated and finite: a store is a file from anyone.

A per-value bound (`MAX_TEXT_BYTES`, 64 MiB) is not a total bound. DuckDB reads a column
`VECTOR_ROWS` values at a time and holds each vector's text whole (decompressed: 30 values of
60 MB that ZSTD kept in 4.7 MB of file were one 1.8 GB vector), and a read copies it again in
its expressions (the seal's message), its Arrow batch and its Python values. Thirty such values
took `gym eval health` to 6.9 GB (attack pass 7, s06), past the analysis cap: an analysis DuckDB
could not finish within the cap ran again without it.

So one bound, `GYMFLOW_ANALYSIS_MEMORY` (default `DEFAULT_BOUND`), covers both sides, and a
read takes at most about twice it:

- DuckDB's memory limit while a command analyses a store (`db.memory_capped`): what DuckDB
  accounts for, a vector's text as it decompresses it among it (a vector of 1.8 GB failed to
  allocate under a 1 GB limit). A query DuckDB cannot finish within it is refused
  (`StoreOverMemory`), never run again without it.
- What it does not account for: an expression's result over a vector, one per thread DuckDB
  runs (the seal's message), and the reader's Arrow batch and Python values of one vector. So
  the text one vector of a table may hold is the bound over DuckDB's threads plus two (a
  quarter on 2 cores), from the statistics DuckDB keeps of each column (`check_text_at_once`,
  on every open, as `stored_values.check_large_text`). Refused at the open, before a value is
  read.

Either refusal is one line naming the store and what passed the bound, a bad-input exit (1),
nothing written; the store reads with the bound raised."""

from __future__ import annotations

import os
import re

import duckdb
from duckdb import DuckDBPyConnection

from gymflow.core.errors import UserError

#: The variable that sets the bound, and the bound without it.
VARIABLE = "GYMFLOW_ANALYSIS_MEMORY"
#: At 3 GB DuckDB spills little at ten million rollouts and every analysis stage peaks under
#: 4 GiB (2 GB: health spent a fifth more CPU spilling, and a 10M reverify ran out;
#: bench/analysis_scale.py).
DEFAULT_BOUND = "3GB"
#: Rows DuckDB holds at once per column (its vector size): a read holds their text together.
VECTOR_ROWS = 2048
#: Copies of a vector's text a read holds besides one per DuckDB thread: its Arrow batch and
#: its Python values.
READ_OUT_COPIES = 2

_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)


class StoreOverMemory(UserError):
    """A store whose read takes more memory than the bound: refused, nothing read or written."""


def analysis_memory() -> str:
    """The bound as DuckDB's memory limit takes it (`3GB`, `512MiB`): `GYMFLOW_ANALYSIS_MEMORY`,
    else `DEFAULT_BOUND`; a value that is not a size is refused, naming the variable."""
    text = os.environ.get(VARIABLE) or DEFAULT_BOUND
    size_bytes(text)
    return text.strip()


def size_bytes(text: str) -> int:
    """`text` (a number and a unit, as DuckDB reads a memory limit: GB is 1000**3, GiB 1024**3)
    in bytes; UserError naming the variable when it is not one."""
    found = _SIZE.fullmatch(text)
    if found is None or found.group(2).lower() not in _UNITS or float(found.group(1)) <= 0:
        raise UserError(
            f"{VARIABLE}={text!r}: not a memory size (a number and B, KB, MB, GB, TB, KiB, "
            "MiB, GiB or TiB, e.g. 3GB)"
        )
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def over_memory(where: str, what: str) -> StoreOverMemory:
    """The refusal: `where` (the store) and `what` passed the bound."""
    return StoreOverMemory(
        f"{where}: {what}, past the memory bound of {analysis_memory()} a read of a store may "
        f"take; nothing was read or written: a store this large reads with {VARIABLE} raised"
    )


def text_at_once_bound(con: DuckDBPyConnection) -> int:
    """Bytes of text one vector of a table may hold: the bound over the copies of it a read
    holds beyond DuckDB's memory limit, one per thread of `con` and `READ_OUT_COPIES`."""
    threads = con.execute("SELECT current_setting('threads')").fetchone()
    return size_bytes(analysis_memory()) // (int(threads[0] if threads else 1) + READ_OUT_COPIES)


def check_text_at_once(
    con: DuckDBPyConnection, where: str, longest: dict[tuple[str, str], int | None]
) -> None:
    """StoreOverMemory unless every `VECTOR_ROWS` rows of each large table hold at most
    `text_at_once_bound()` bytes of text, all its text columns together. `longest` is the
    longest value of each (table, column) from DuckDB's statistics (`stored_values.
    longest_texts`, read at every open): a table whose longest values fill a vector within the
    bound costs nothing more (every store the benchmarks write: kilobytes). Only a table they
    do not is measured, from the statistics of its stored segments (`pragma_storage_info`:
    each segment's rows and total text bytes, no value read): the most text a row group holds,
    which holds any vector of it (a segment spans a row group or less). What this trusts is
    what `check_large_text` trusts: the statistics in the file."""
    bound = text_at_once_bound(con)
    tables: dict[str, list[int | None]] = {}
    for (table, _), length in longest.items():
        tables.setdefault(table, []).append(length)
    for table, lengths in tables.items():
        if None not in lengths and VECTOR_ROWS * sum(length or 0 for length in lengths) <= bound:
            continue
        group, held = _most_text_in_a_row_group(con, table)
        if held > bound:
            raise over_memory(
                where,
                f"table {table} holds {held:,} bytes of text in row group {group} (DuckDB reads "
                f"{VECTOR_ROWS:,} rows of it at once; at most {bound:,} fit)",
            )


def _most_text_in_a_row_group(con: DuckDBPyConnection, table: str) -> tuple[int, int]:
    """(row group, bytes of text) of the row group of `table` holding the most text."""
    database = con.execute("SELECT current_database()").fetchone()
    name = '"{}".main.{}'.format(str(database[0] if database else "").replace('"', '""'), table)
    row = con.execute(
        "SELECT row_group_id, sum(coalesce(TRY_CAST(stats['total_string_length'] AS BIGINT), 0)) "
        "AS held FROM pragma_storage_info(?) WHERE segment_type = 'VARCHAR' "
        "GROUP BY row_group_id ORDER BY held DESC LIMIT 1",
        [name],
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def refused_out_of_memory(where: str, error: duckdb.OutOfMemoryException) -> StoreOverMemory:
    """DuckDB's OutOfMemoryException within the bound as the refusal, its first line kept."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else "out of memory"
    return over_memory(where, f"DuckDB could not read it within the bound ({said})")
