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
  quarter on 2 cores), from the statistics DuckDB keeps of each column and, where those could
  pass it, of each stored segment, vector by vector (`check_text_at_once`, on every open, as
  `stored_values.check_large_text`). Refused at the open, before a value is read.

Either refusal is one line naming the store and what passed the bound, a bad-input exit (1),
nothing written; the store reads with the bound raised."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import duckdb
from duckdb import DuckDBPyConnection

from gymflow.core.config import MAX_TEXT_BYTES
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
    do not is measured, vector by vector, from the statistics of its stored segments
    (`_most_text_in_a_vector`, no value read). What this trusts is what `check_large_text`
    trusts: the statistics in the file; and it runs after that check, so no value is longer
    than `MAX_TEXT_BYTES`."""
    bound = text_at_once_bound(con)
    tables: dict[str, dict[str, int | None]] = {}
    for (table, column), length in longest.items():
        tables.setdefault(table, {})[column] = length
    for table, columns in tables.items():
        lengths = columns.values()
        if None not in lengths and VECTOR_ROWS * sum(length or 0 for length in lengths) <= bound:
            continue
        most = _most_text_in_a_vector(con, table, columns)
        if most.held > bound:
            raise over_memory(
                where,
                f"table {table} holds {most.held:,} bytes of text (at most, by its statistics) in "
                f"rows {most.first:,} to {most.first + VECTOR_ROWS - 1:,} of row group "
                f"{most.group}, which DuckDB reads at once; at most {bound:,} fit",
            )


@dataclass(frozen=True, slots=True)
class VectorText:
    """The most text one vector of a table may hold: `held` bytes, in the `VECTOR_ROWS` rows
    from `first` of row group `group`."""

    group: int
    first: int
    held: int


#: The most text each vector of a table may hold, by the statistics of the segments it reads
#: (`pragma_storage_info`: per column, runs of rows each with its row count and the longest,
#: shortest and total length of its text). A scan reads a row group `VECTOR_ROWS` rows at a
#: time from its first row, and a segment is a run of rows of one column within a row group
#: (a block's worth: a few hundred rows of kilobytes, tens of thousands of short ones), so a
#: vector holds of each segment it overlaps, `k` of its `rows` rows, at most `k` of its longest
#: values and at most its total less the other rows' shortest (nothing for rows that may be
#: NULL). An honest store's few long values spread over a row group count once each, where the
#: row group's total counted them all. A segment with updates keeps the statistics of the rows
#: before them, so its rows count at the longest value of the column (the table's statistics,
#: which the updates do keep). $1: the table; $2 and $3: its text columns and their longest.
_VECTOR_TEXT = f"""
    WITH longest AS (SELECT unnest($2::VARCHAR[]) AS column_name, unnest($3::BIGINT[]) AS longest),
    segments AS (
        SELECT row_group_id AS grp, start, count AS rows, has_updates, longest.longest,
            TRY_CAST(stats['max_string_length'] AS BIGINT) AS seg_longest,
            TRY_CAST(stats['min_string_length'] AS BIGINT) AS seg_shortest,
            TRY_CAST(stats['total_string_length'] AS BIGINT) AS total,
            coalesce(TRY_CAST(stats['has_null'] AS BOOLEAN), TRUE) AS nulls
        FROM pragma_storage_info($1) JOIN longest USING (column_name)
        WHERE segment_type = 'VARCHAR'),
    shares AS (
        SELECT *, least(start + rows, first + {VECTOR_ROWS}) - greatest(start, first) AS k
        FROM (SELECT *, {VECTOR_ROWS} * unnest(range(start // {VECTOR_ROWS},
                (start + rows - 1) // {VECTOR_ROWS} + 1)) AS first FROM segments))
    SELECT grp, first, sum(CASE
        WHEN has_updates OR seg_longest IS NULL OR total IS NULL THEN k * longest
        ELSE least(k * seg_longest,
            total - (rows - k) * CASE WHEN nulls THEN 0 ELSE seg_shortest END) END
    )::BIGINT AS held
    FROM shares GROUP BY grp, first ORDER BY held DESC, grp, first LIMIT 1
"""


def _most_text_in_a_vector(
    con: DuckDBPyConnection, table: str, longest: dict[str, int | None]
) -> VectorText:
    """The vector of `table` that may hold the most text (`_VECTOR_TEXT`); `longest`: the
    longest value of each of its text columns by the table's statistics, `MAX_TEXT_BYTES`
    where they do not say (the open's `check_large_text` read every such value)."""
    database = con.execute("SELECT current_database()").fetchone()
    name = '"{}".main.{}'.format(str(database[0] if database else "").replace('"', '""'), table)
    row = con.execute(
        _VECTOR_TEXT,
        [name, list(longest), [MAX_TEXT_BYTES if n is None else n for n in longest.values()]],
    ).fetchone()
    return VectorText(int(row[0]), int(row[1]), int(row[2])) if row else VectorText(0, 0, 0)


def refused_out_of_memory(where: str, error: duckdb.OutOfMemoryException) -> StoreOverMemory:
    """DuckDB's OutOfMemoryException within the bound as the refusal, its first line kept."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else "out of memory"
    return over_memory(where, f"DuckDB could not read it within the bound ({said})")
