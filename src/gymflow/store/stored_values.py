"""Values a store holds, checked where gymflow reads them: a store is a file from anyone, and a
value no gymflow writes (a config that is not JSON, a verifier's parameters that are a list,
`runs.repeats` of two billion, one verdict's details that are not JSON, a NaN latency) ended
read commands in a traceback, "this is a gymflow bug" (second attacker's pass over 2a91e13,
a20: 10 edits, 34 crashes), and `repeats` of two billion made profile ask numpy for 44.7 GiB.

Two doors. Opening a store checks its small tables whole (`check_small_tables`: the runs row,
the verifier versions), before any analysis sizes an array from them: `repeats` above a
config's own limit is refused before anything is allocated. A value of the large tables (one
row's JSON among millions) is not checked on every read; a read that DuckDB stops on a value
(`named_bad_values`) looks for the first such value in the store, and names it. Either way: one
line naming the store file, the table, the row and the field, a bad-input exit, nothing
written."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import duckdb
from duckdb import DuckDBPyConnection

from gymflow.core.config import MAX_REPEATS, MAX_TEXT_BYTES
from gymflow.core.errors import UserError
from gymflow.core.json_text import parse
from gymflow.store.tool_lists import list_id


class StoredValueError(UserError):
    """A value in a store that no gymflow writes: the store was edited or damaged. Nothing was
    written; the run's original store reads."""


#: What names a row of each table, in messages.
ROW_KEYS = {
    "runs": ("run_id",),
    "tasks": ("task_id",),
    "rollouts": ("rollout_id",),
    "model_calls": ("rollout_id", "call_index", "attempt"),
    "verifier_versions": ("verifier_version",),
    "verifications": ("rollout_id", "verifier_version"),
}
#: The JSON columns of the large tables: a value that is not JSON stops DuckDB's `->>`.
JSON_COLUMNS = (
    ("verifications", "details_json"),
    ("rollouts", "trajectory_json"),
    ("rollouts", "counters_json"),
    ("model_calls", "response_json"),
    ("model_calls", "request_json"),
    ("model_calls", "sampling_json"),
    ("tasks", "data_json"),
)
#: Numbers that are finite wherever gymflow writes them (a NaN cannot be binned or cast).
FINITE_COLUMNS = (
    ("rollouts", "latency_s"),
    ("model_calls", "latency_s"),
    ("verifications", "reward"),
)
#: DuckDB's errors of a value it cannot read as asked (malformed JSON, a NaN cast, a range).
VALUE_ERRORS = (
    duckdb.InvalidInputException,
    duckdb.ConversionException,
    duckdb.OutOfRangeException,
)


def store_name(con: DuckDBPyConnection) -> str:
    """The store's file, for messages."""
    try:
        row = con.execute(
            "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()
    except duckdb.Error:
        return "run store"
    return str(row[0]) if row and row[0] else "run store"


def bad_value(where: str, table: str, row: Any, field: str, what: str) -> StoredValueError:
    return StoredValueError(
        f"{where}: table {table}, row {row}, field {field}: {what}, which no gymflow writes "
        "(the store was edited or damaged); nothing was read or written: use the run's "
        "original store"
    )


def stored_json(
    con: DuckDBPyConnection, text: str | None, table: str, row: Any, field: str, empty: str
) -> Any:
    """A JSON value read back from the store (`empty` for NULL or ""), or StoredValueError
    naming the store, the table, the row and the field: never a traceback (a value nested too
    deep to read, in a run someone sent, ended exports in RecursionError)."""
    try:
        return parse(text or empty)
    except ValueError as exc:
        raise bad_value(store_name(con), table, row, field, str(exc)) from None


#: What `_parsed` gives for a value that is no JSON.
_NOT_JSON = object()


def _parsed(text: Any) -> Any:
    try:
        return parse(text)
    except (TypeError, ValueError):
        return _NOT_JSON


def _object(text: Any) -> str | None:
    """What is wrong with a JSON-object column's value (None: nothing; NULL is allowed)."""
    if text is None:
        return None
    value = _parsed(text)
    if value is _NOT_JSON:
        return "not JSON"
    return None if isinstance(value, dict) else f"JSON {type(value).__name__}, not an object"


#: The JSON of the small tables gymflow reads whole at every open: (table, key, column).
_SMALL_JSON = (
    ("runs", "run_id", "config_json"),
    ("runs", "run_id", "sampling_json"),
    ("verifier_versions", "verifier_version", "params_json"),
    ("tool_lists", "tools_id", "tools_json"),
)
#: A bound far above any config, parameters or tool list gymflow writes...
SMALL_JSON_BYTES = 16 * 2**20
#: ...and on all of them together: each capped, many rows were read at once all the same (20
#: tool lists of 15 MB, half a MB of file, took health 767 MB; attack pass 6, s16).
SMALL_JSON_TOTAL_BYTES = 256 * 2**20


def check_small_tables(con: DuckDBPyConnection, where: str) -> None:
    """The runs rows, verifier versions and tool lists as gymflow writes them, or
    StoredValueError: every JSON column an object, `repeats` within a config's limit (1 to
    `MAX_REPEATS`), each tool list a JSON list whose hash is its id."""
    # sized before any value is read: a value DuckDB stores compressed (200 MB of config in 256
    # KB of file) took health 1.1 GB and 12 s before any check (attack pass 5, s04); one query
    # for every column, as every open runs it
    sizes = " UNION ALL ".join(
        f"(SELECT '{table}', '{column}', arg_max({key}, strlen({column})), "
        f"max(strlen({column})), sum(strlen({column})) FROM {table})"
        for table, key, column in _SMALL_JSON
    )
    found = con.execute(sizes).fetchall()
    for table, column, key, longest, _ in found:
        if longest is not None and longest > SMALL_JSON_BYTES:
            raise bad_value(where, table, key, column, f"{longest:,} bytes of JSON (gymflow "
                            f"writes at most {SMALL_JSON_BYTES:,} here)")  # fmt: skip
    if (total := sum(int(row[4] or 0) for row in found)) > SMALL_JSON_TOTAL_BYTES:
        table, column, *_ = max(found, key=lambda row: int(row[4] or 0))
        raise StoredValueError(
            f"{where}: {total:,} bytes of JSON in its runs, verifier versions and tool lists, "
            f"most in {table}.{column} (gymflow writes at most {SMALL_JSON_TOTAL_BYTES:,} in "
            "all); not read"
        )
    for run_id, repeats, *texts in con.execute(
        "SELECT run_id, repeats, config_json, sampling_json FROM runs ORDER BY run_id"
    ).fetchall():
        if repeats is not None and not 1 <= repeats <= MAX_REPEATS:
            raise bad_value(
                where, "runs", run_id, "repeats", f"{repeats} repeats (a config allows 1 to "
                f"{MAX_REPEATS})"
            )  # fmt: skip
        for field, text in zip(("config_json", "sampling_json"), texts, strict=True):
            if (wrong := _object(text)) is not None:
                raise bad_value(where, "runs", run_id, field, wrong)
    for version, text in con.execute(
        "SELECT verifier_version, params_json FROM verifier_versions ORDER BY 1"
    ).fetchall():
        if (wrong := _object(text)) is not None:
            raise bad_value(where, "verifier_versions", version, "params_json", wrong)
    # a list is spliced into its call's JSON as text where the call refers to it: one not the
    # list its id hashes, or no JSON list (`], "instructions": "..."`), changed the requests
    # training data and exports read, under no seal (attack pass 5, s03)
    for tools_id, text in con.execute("SELECT tools_id, tools_json FROM tool_lists").fetchall():
        if text is None or list_id(text) != tools_id or not isinstance(_parsed(text), list):
            raise bad_value(where, "tool_lists", tools_id, "tools_json", "not the JSON list its "
                            "id is the hash of")  # fmt: skip


#: The tables whose text is read row by row by the analysis, never whole at an open.
LARGE_TABLES = ("tasks", "rollouts", "model_calls", "verifications")


def longest_texts(con: DuckDBPyConnection) -> dict[tuple[str, str], int | None]:
    """The longest value of each text column of the large tables the store's file holds, by
    (table, column), as DuckDB's statistics of the table hold it (None: not known), in two
    queries and without reading a value: the statistics of an empty selection of each table,
    kept by the outer join that gives it one row (`stats()` over the table itself scans it).
    Tables by their qualified names: a read-only open of an older store puts a temporary view
    in front of one (`db._stand_in_for_new_tables`)."""
    rows = con.execute(
        "SELECT database_name, table_name, list(column_name ORDER BY column_index) "
        "FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND data_type = 'VARCHAR' AND list_contains(?, table_name) "
        "GROUP BY ALL ORDER BY table_name",
        [list(LARGE_TABLES)],
    ).fetchall()
    if not rows:
        return {}
    parts: list[str] = []
    for database, table, columns in rows:
        name = '"{}".main.{}'.format(str(database).replace('"', '""'), table)
        lengths = ", ".join(f"stats(x.{c})['max_string_length']::BIGINT" for c in columns)
        parts.append(
            f"SELECT '{table}', [{lengths}] FROM (SELECT * FROM {name} WHERE rowid < 0) x "
            "RIGHT JOIN (SELECT 1) ON TRUE"
        )
    found = dict(con.execute(" UNION ALL ".join(parts)).fetchall())
    return {
        (table, column): longest
        for _, table, columns in rows
        for column, longest in zip(columns, found[table], strict=True)
    }


def check_large_text(
    con: DuckDBPyConnection, where: str, longest: dict[tuple[str, str], int | None]
) -> None:
    """Every text value of the large tables within MAX_TEXT_BYTES, or StoredValueError naming
    the table, the row and the field: a value of gigabytes in one rollout's output was read
    whole by every analysis command, many times over (lowered, split, matched). Asked of
    DuckDB's statistics of each column (the longest value it holds, kept as rows are written,
    updated or replayed from a WAL), so an open reads no value; only a column whose longest
    value passes the bound, or is not known, is scanned, to name the row. What this trusts: the
    statistics in the file, as DuckDB's own planner does; a file rewritten with statistics
    that understate a value (and its checksums made right) is not caught here. `longest`:
    `longest_texts(con)`, which the open's other checks of the text read too."""
    for (table, column), length in longest.items():
        if length is not None and length <= MAX_TEXT_BYTES:
            continue
        database = con.execute("SELECT current_database()").fetchone()
        name = '"{}".main.{}'.format(str(database[0] if database else "").replace('"', '""'), table)
        row = con.execute(
            f"SELECT {_key_sql(table)}, strlen({column}) FROM {name} "
            f"WHERE strlen({column}) > {MAX_TEXT_BYTES} LIMIT 1"
        ).fetchone()
        if row is not None:
            raise bad_value(where, table, row[0], column, f"{row[1]:,} bytes of text "
                            f"(gymflow writes at most {MAX_TEXT_BYTES:,} here)")  # fmt: skip


def _key_sql(table: str) -> str:
    return f"concat_ws(' / ', {', '.join(f'{c}::VARCHAR' for c in ROW_KEYS[table])})"


def first_bad_value(con: DuckDBPyConnection) -> StoredValueError | None:
    """The first value of the large tables DuckDB cannot read as gymflow does: JSON that is
    not JSON, a number that is not finite; None when there is none."""
    checks = [(t, c, f"NOT json_valid({c})", "not JSON") for t, c in JSON_COLUMNS]
    checks += [(t, c, f"NOT isfinite({c})", "not a finite number") for t, c in FINITE_COLUMNS]
    for table, column, bad, what in checks:
        try:
            row = con.execute(
                f"SELECT {_key_sql(table)}, {column}::VARCHAR FROM {table} WHERE {bad} LIMIT 1"
            ).fetchone()
        except (*VALUE_ERRORS, UnicodeDecodeError):
            # bytes that are not UTF-8 text, left by a block rewritten with its checksum kept
            # (attack pass 5, s05): DuckDB fails on the row it would name
            return bad_value(store_name(con), table, "(unreadable)", column, "not UTF-8 text")
        if row is not None:
            return bad_value(store_name(con), table, row[0], column, f"{what} ({row[1][:40]!r})")
    return None


P = ParamSpec("P")
R = TypeVar("R")


def named_bad_values(
    fn: Callable[Concatenate[DuckDBPyConnection, P], R],
) -> Callable[Concatenate[DuckDBPyConnection, P], R]:
    """`fn(con, ...)`, a read of a whole store: where DuckDB stops on a value it cannot read,
    the value is found and named (StoredValueError) in place of DuckDB's error."""

    @functools.wraps(fn)
    def named(con: DuckDBPyConnection, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(con, *args, **kwargs)
        except VALUE_ERRORS:
            found = first_bad_value(con)
            if found is None:
                raise
            raise found from None

    return named
