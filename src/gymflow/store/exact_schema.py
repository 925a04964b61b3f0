"""The exact schema or a refusal: every gymflow table a store holds must be the table gymflow
creates, column for column (name, order, type, default, generated or not, nullability) and
constraint for constraint.

A store is a file from anyone, and a table's own expressions run inside gymflow's statements: a
column `GENERATED ALWAYS AS (...)` computes what a reader selects (a forged seal, computed from
whatever the session holds), a `DEFAULT` fills what a writer leaves out (a column filled with
anything the session can read), a `CHECK` runs on every insert. Object names alone (the foreign
objects check in `db.py`) miss all of them. So each table's definition, as DuckDB itself writes
it out (`duckdb_tables().sql`, rebuilt from its catalogue, not the text the file was made with),
is compared with gymflow's own, made once per process in an empty in-memory database; a store
whose table differs is refused in one line naming the first difference."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import duckdb

from gymflow.store.schema import SPECS, Table


@dataclass(frozen=True, slots=True)
class Shape:
    """One table as DuckDB describes it: its definition and its columns and constraints."""

    sql: str
    #: (name, type, default, nullable) in order; a generated column's expression is its default
    columns: tuple[tuple[str, str, str | None, bool], ...]
    constraints: tuple[tuple[str, str | None, tuple[str, ...]], ...]


_SQL = (
    "SELECT table_name, sql FROM system.main.duckdb_tables() "
    "WHERE database_name = system.main.current_database() AND schema_name = 'main'"
)
_COLUMNS = (
    "SELECT table_name, column_name, data_type, column_default, is_nullable "
    "FROM system.main.duckdb_columns() "
    "WHERE database_name = system.main.current_database() AND schema_name = 'main' "
    "AND table_name = ? ORDER BY column_index"
)
_CONSTRAINTS = (
    "SELECT constraint_type, expression, constraint_column_names "
    "FROM system.main.duckdb_constraints() "
    "WHERE database_name = system.main.current_database() AND schema_name = 'main' "
    "AND table_name = ? ORDER BY constraint_index"
)


def _shape(con, table: str, sql: str) -> Shape:
    columns = tuple(
        (name, kind, default, bool(nullable))
        for _, name, kind, default, nullable in con.execute(_COLUMNS, [table]).fetchall()
    )
    constraints = tuple(
        (kind, expression, tuple(names or ()))
        for kind, expression, names in con.execute(_CONSTRAINTS, [table]).fetchall()
    )
    return Shape(sql, columns, constraints)


@functools.cache
def expected(shapes: int = 3) -> dict[str, tuple[str, ...]]:
    """Every definition each gymflow table may have, as DuckDB writes it out: as created now,
    as an older store has it once its added columns were added (`ALTER TABLE`), and, for a
    reader of an older store not yet opened to write, without the added columns
    (`db._stand_in_for_new_tables` fills them): the first `shapes` of those. Each variant is
    built in an in-memory database of its own, all on one connection (a connection per table
    took 2 s of every command)."""
    found: dict[str, list[str]] = {}
    con = duckdb.connect()
    try:
        for at in range(shapes):
            con.execute(f"ATTACH ':memory:' AS variant_{at}")
            con.execute(f"USE variant_{at}")
            for spec in SPECS:
                variants = _variants(spec)
                for ddl in variants[min(at, len(variants) - 1)]:
                    con.execute(ddl)
            for table, sql in con.execute(_SQL).fetchall():
                if sql not in found.setdefault(table, []):
                    found[table].append(sql)
    finally:
        con.close()
    return {name: tuple(sqls) for name, sqls in found.items()}


def _ours(table: str) -> Shape:
    """Gymflow's table as created now, described (only to name a difference)."""
    con = duckdb.connect()
    try:
        con.execute(next(spec for spec in SPECS if spec.name == table).ddl)
        return _shape(con, table, dict(con.execute(_SQL).fetchall())[table])
    finally:
        con.close()


def _variants(spec: Table) -> list[tuple[str, ...]]:
    base = Table(spec.name, tuple(c for c in spec.columns if not c.added), spec.key)
    if base.columns == spec.columns:
        return [(spec.ddl,)]
    return [(spec.ddl,), (base.ddl, *spec.added_columns()), (base.ddl,)]


def differences(con) -> list[str]:
    """What differs between the store `con`'s gymflow tables and gymflow's, one phrase per
    table that differs (empty: every table present is gymflow's). Tables absent are not
    differences: a writer creates them, a reader stands in for them."""
    # a store of this gymflow has every table as created now: the older shapes are built only
    # for a table that is not (about a third of the cost: 15 of 42 CPU ms at load 7)
    current, wanted = expected(1), None
    found = []
    for table, sql in con.execute(_SQL).fetchall():
        if table not in current or sql in current[table]:
            continue
        wanted = wanted or expected()
        if sql in wanted[table]:
            continue
        found.append(f"table {table}: {_what_differs(_shape(con, table, sql), _ours(table))}")
    return found


def _what_differs(store: Shape, ours: Shape) -> str:
    """The first difference between a store's table and gymflow's, named."""
    theirs = {column[0]: column for column in store.columns}
    mine = {column[0]: column for column in ours.columns}
    if extra := [name for name in theirs if name not in mine]:
        return f"column {extra[0]!r} is not gymflow's"
    for at, (name, kind, default, nullable) in enumerate(ours.columns):
        if name not in theirs:
            continue  # an added column an older store lacks: checked by the caller's variants
        _, their_kind, their_default, their_nullable = theirs[name]
        if their_kind != kind:
            return f"column {name!r} is {their_kind}, gymflow's is {kind}"
        if their_default != default:
            return (
                f"column {name!r} has default or expression {_clip(str(their_default), 80)}, "
                f"gymflow's {default or 'none'}"
            )
        if their_nullable != nullable:
            return f"column {name!r} is {'' if their_nullable else 'NOT '}NULL, unlike gymflow's"
        if (position := store.columns.index(theirs[name])) != at:
            return f"column {name!r} is at position {position + 1}, gymflow's at {at + 1}"
    if store.constraints != ours.constraints:
        return "its constraints (keys, checks) are not gymflow's"
    return f"its definition is not gymflow's ({_clip(store.sql)})"


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
