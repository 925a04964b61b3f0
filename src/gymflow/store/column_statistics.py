"""Whether a store's column statistics describe the values it holds.

DuckDB keeps each column's least and greatest value, whether it holds NULLs, whether its
strings hold a non-ASCII byte and their lengths in the file, for every segment of rows and for
the whole table, and trusts them: the planner folds a filter they rule out and reads an
ungrouped `min()` from them, a scan skips a segment whose bounds exclude the value sought,
`count(c)` is read as `count(*)` where they say no NULL and `length()` counts bytes where they
say ASCII. Rewritten in the file (each block's checksum made right), they change every number
gymflow reads while every value, and so every seal, stays as written: `verifications.status`
stated as 'zz' made `gym eval profile` score none of a run's verdicts. So the seal check, which
reads the values anyway, compares each column's statistics with them (`misstated`), and a store
whose statistics exclude a value it holds is refused (`check_statistics`).

Statistics may be wider than the values (a deleted row's value still counts in its segment's);
what they exclude is wrong, and what they widen is wrong where DuckDB answers from it. The
values are read grouped by segment with DuckDB's statistics propagation off (`_unpropagated`).
What the listing shows is compared directly; what it cannot show is asked of DuckDB itself
(`_compare`). A string's bound is its first bytes (12, or 8 in a file of DuckDB 1) with a flag,
listed nowhere, saying whether it is the whole value; a segment updated in memory has bounds
DuckDB merges with the updates', unlisted; and a bound wider than the values is read by an
ungrouped `min()` where it is flagged exact. So a filter on a greatest value that goes on past
its bound, and on every bound of an updated segment, must find a row (`_probes`), and the
ungrouped `min()` and `max()` of a column some of whose bounds are not the values themselves
must read the values (`_Answer`). A list column's element statistics are compared for the
table only: no filter of gymflow's is pushed into a list's elements."""

from __future__ import annotations

import bisect
import contextlib
import threading
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

import duckdb
from duckdb import DuckDBPyConnection

from gymflow.store.db import StoreError
from gymflow.store.schema import SPECS

#: How many misstated columns a refusal names at most.
_NAMED = 5
#: Rows per cell of the lookup that gives a row its piece (`_piece_of_row`).
_CELL = 2048
#: A first row no row reaches.
_NEVER = 1 << 62
#: Filters asked of DuckDB in one statement at most.
_PROBES_AT_ONCE = 400


@dataclass(frozen=True, slots=True)
class Misstated:
    """A column whose statistics exclude a value it holds."""

    table: str
    column: str
    #: "the table", or a segment's rows ("rows 576-1151")
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.table}.{self.column} ({self.where}: {self.what})"


@dataclass(frozen=True, slots=True)
class _Values:
    """What some rows of one column hold: how many rows and values, their bounds and, for
    strings, their byte lengths and whether one holds a non-ASCII byte."""

    rows: int = 0
    values: int = 0
    low: Any = None
    high: Any = None
    longest: int = 0
    shortest: int = 0
    unicode: bool = False

    def __add__(self, other: _Values) -> _Values:
        rows = self.rows + other.rows
        if not self.values or not other.values:
            return replace(other if other.values else self, rows=rows)
        return _Values(
            rows,
            self.values + other.values,
            _bound(min, self.low, other.low),
            _bound(max, self.high, other.high),
            max(self.longest, other.longest),
            min(self.shortest, other.shortest),
            self.unicode or other.unicode,
        )


def _total(parts: Iterable[_Values]) -> _Values:
    total = _Values()
    for part in parts:
        total += part
    return total


def _bound(pick: Callable[..., Any], a: Any, b: Any) -> Any:
    """The lesser or greater (`pick`) of two bounds, either of which may be unread (a list's)."""
    return b if a is None else a if b is None else pick(a, b, key=_order)


def _as_stats(stated: Any) -> dict[str, Any]:
    """Statistics as DuckDB gives them (a struct), or none when it gives something else."""
    return cast(dict[str, Any], stated) if isinstance(stated, dict) else {}


def _order(value: Any) -> tuple[int, Any]:
    """DuckDB's order: a float NaN above every number (Python's never compares)."""
    return (1, 0.0) if isinstance(value, float) and value != value else (0, value)


def _bound_bytes(text: str) -> bytes:
    """A string bound's bytes: DuckDB shows every byte outside printable ASCII, the quote and
    the backslash as `\\xHH`."""
    raw, at, shown = bytearray(), 0, text.encode()
    while at < len(shown):
        if shown[at : at + 2] == b"\\x" and at + 4 <= len(shown):
            raw.append(int(shown[at + 2 : at + 4], 16))
            at += 4
        else:
            raw.append(shown[at])
            at += 1
    return bytes(raw)


def excludes(stats: dict[str, Any], found: _Values, text: bool, bounded: bool = True) -> str | None:
    """What in `stats` excludes a value `found` holds (None: they describe it, or only DuckDB
    can tell: `cut_high`). `bounded`: the statistics are the values' (not their NULL flags'),
    and list their least and greatest value when there is one."""
    if found.rows > found.values and stats.get("has_null") is False:
        return "says no row is NULL"
    if not found.values:
        return None
    if stats.get("has_no_null") is False:
        return "says every row is NULL"
    low, high = stats.get("min"), stats.get("max")
    if bounded and (low is None or high is None):
        # DuckDB lists none for a greatest value below the least, yet merges each into the
        # row group's bounds, and skips the row group by them
        return f"lists no bounds for its {found.values} values"
    if not text:
        if low is not None and _order(low) > _order(found.low):
            return f"least value {low!r} above the value {found.low!r}"
        if high is not None and _order(high) < _order(found.high):
            return f"greatest value {high!r} below the value {found.high!r}"
        return None
    if low is not None and (bound := _bound_bytes(low)) > found.low.encode()[: len(bound)]:
        return f"least value {low!r} above the value {found.low[:40]!r}"
    if high is not None and (bound := _bound_bytes(high)) < found.high.encode()[: len(bound)]:
        return f"greatest value {high!r} below the value {found.high[:40]!r}"
    if (longest := stats.get("max_string_length")) is not None and longest < found.longest:
        return f"longest string {longest} bytes, one is {found.longest}"
    if (shortest := stats.get("min_string_length")) is not None and shortest > found.shortest:
        return f"shortest string {shortest} bytes, one is {found.shortest}"
    if stats.get("has_unicode") is False and found.unicode:
        return "says no string holds a non-ASCII byte"
    return None


def cut_high(stats: dict[str, Any], found: _Values) -> bool:
    """The greatest value held begins with the stated bound and goes on: the bound is its first
    bytes, or the whole of a smaller value, as a flag no listing shows says."""
    high = stats.get("max")
    if not found.values or not isinstance(high, str) or not isinstance(found.high, str):
        return False
    bound, held = _bound_bytes(high), found.high.encode()
    return len(held) > len(bound) and held.startswith(bound)


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    #: its values (a list's: its elements) are strings
    text: bool
    listed: bool

    def aggregates(self, name: str | None = None) -> str:
        """What a group's query reads of it (or of `name`, its elements): count, min, max and,
        for strings, the longest and shortest in bytes and whether one is not ASCII."""
        c = f'"{name or self.name}"'
        if self.listed and name is None:
            return f"count({c}), NULL, NULL"
        read = f"count({c}), min({c}), max({c})"
        if not self.text:
            return read
        return f"{read}, max(strlen({c})), min(strlen({c})), bool_or(strlen({c}) <> length({c}))"

    @property
    def stated(self) -> str:
        """Its statistics for the table, as the planner reads them."""
        return f'stats("{self.name}")'

    def check(
        self,
        found: list[Misstated],
        table: str,
        where: str,
        stats: Any,
        held: _Values,
        bounded: bool = True,
    ):
        what = excludes(
            _as_stats(stats),
            held,
            self.text and not self.listed,
            bounded and not self.listed,
        )
        if what is not None:
            found.append(Misstated(table, self.name, where, what))


def _read(row: tuple[Any, ...], columns: list[_Column]) -> list[_Values]:
    """What each of `columns` holds in a group of rows, from its query's row (the group's key
    first, its rows second, then each column's `aggregates`)."""
    parts: list[_Values] = []
    at = 2
    for column in columns:
        values, low, high = row[at : at + 3]
        if not column.text and (isinstance(low, str) or isinstance(high, str)):
            # DuckDB gives Python a timestamp it cannot hold (past year 9999) as text
            raise ValueError(f"{column.name} holds a value Python cannot compare: {low!r:.40}")
        if column.text and not column.listed:
            parts.append(_Values(row[1], values, low, high, *row[at + 3 : at + 6]))
            at += 6
        else:
            parts.append(_Values(row[1], values, low, high))
            at += 3
    return parts


@dataclass(frozen=True, slots=True)
class _Segment:
    column_id: int
    #: its first row (a rowid) and how many rows it holds
    first: int
    rows: int
    stats: Any
    #: rows of its column in its row group were updated in memory (a WAL replayed, or writes
    #: of this process not yet checkpointed): DuckDB merges their statistics, which nothing
    #: lists, with the stored ones
    updated: bool
    #: it holds the values (not their NULL flags): its statistics bound them
    bounded: bool

    @property
    def where(self) -> str:
        return f"rows {self.first}-{self.first + self.rows - 1}"


def _segments(stored: list[tuple[Any, ...]]) -> tuple[list[_Segment], int]:
    """Of a table's rows of `pragma_storage_info` (as `misstated` reads them): the segments of
    each column that hold its values or NULL flags (a list's: its NULL flags only), with their
    first row; and how many rows the table stores."""
    group_rows: dict[int, int] = {}
    updated: set[tuple[int, int]] = set()
    for group, column, path, _start, count, _stats, _kind, has_updates in stored:
        if column == 0 and path == "[0]":
            group_rows[group] = group_rows.get(group, 0) + count
        if has_updates:
            updated.add((group, column))
    firsts: dict[int, int] = {}
    rows = 0
    for group in sorted(group_rows):
        firsts[group], rows = rows, rows + group_rows[group]
    return [
        _Segment(
            column,
            firsts[group] + start,
            count,
            stats,
            (group, column) in updated,
            path == f"[{column}]",
        )
        for group, column, path, start, count, stats, kind, _has_updates in stored
        if group in firsts
        and (path == f"[{column}, 0]" or (path == f"[{column}]" and not kind.endswith("[]")))
    ], rows


def _piece_of_row(pieces: list[int], rows: int) -> tuple[str, list[list[int]]]:
    """SQL giving each row the index of its piece (`pieces`: each piece's first row, sorted),
    and its parameters: looked up by the row's cell of `_CELL` rows (the piece the cell begins
    in, plus one for each first row inside the cell the row is at or past), not joined (an ASOF
    join sorted every row with its values: 2.3 s against 0.6 s at a million rollouts)."""
    if len(pieces) == 1:
        return "0", []
    cells = rows // _CELL + 1
    begins = [bisect.bisect_right(pieces, cell * _CELL) - 1 for cell in range(cells)]
    inside: dict[int, list[int]] = {}
    for first in pieces:
        if first % _CELL:
            inside.setdefault(first // _CELL, []).append(first)
    later = [[_NEVER] * cells for _ in range(max(map(len, inside.values()), default=0))]
    for at, firsts in inside.items():
        for depth, first in enumerate(firsts):
            later[depth][at] = first
    cell = f"rowid // {_CELL} + 1"
    sql = f"(?::INTEGER[])[{cell}]" + "".join(
        f" + (rowid >= (?::BIGINT[])[{cell}])::INTEGER" for _ in later
    )
    return sql, [begins, *later]


@dataclass(frozen=True, slots=True)
class _Probe:
    """A filter asked of DuckDB, statistics and all, that must find a row: `test` on `column`
    (`= ?` with `value`, or `IS NULL`) over rows `span` (None: the table)."""

    table: str
    column: _Column
    where: str
    test: str
    value: Any = None
    span: tuple[int, int] | None = None

    @property
    def sql(self) -> str:
        rows = "" if self.span is None else f"rowid BETWEEN {self.span[0]} AND {self.span[1]} AND "
        return f'SELECT count(*) FROM "{self.table}" WHERE {rows}"{self.column.name}" {self.test}'

    @property
    def params(self) -> list[Any]:
        return [] if self.test == "IS NULL" else [self.value]

    def failed(self) -> Misstated:
        shown = self.test if self.test == "IS NULL" else f"= {self.value!r:.60}"
        return Misstated(self.table, self.column.name, self.where, f"a filter {shown} finds no row")


def _probes(
    table: str,
    column: _Column,
    where: str,
    held: _Values,
    span: tuple[int, int] | None,
    everything: bool,
) -> list[_Probe]:
    """The filters that must find a row of `held`: on its greatest value, and with `everything`
    (a segment DuckDB skips by statistics it does not list) on its least value and NULL."""
    found: list[_Probe] = []
    if held.values and not column.listed:
        found.append(_Probe(table, column, where, "= ?", held.high, span))
        if everything:
            found.append(_Probe(table, column, where, "= ?", held.low, span))
    if everything and held.rows > held.values:
        found.append(_Probe(table, column, where, "IS NULL", None, span))
    return found


def _asked(con: DuckDBPyConnection, probes: list[_Probe]) -> list[Misstated]:
    """The probes whose filter finds no row, asked `_PROBES_AT_ONCE` to a statement."""
    failed: list[Misstated] = []
    for at in range(0, len(probes), _PROBES_AT_ONCE):
        batch = probes[at : at + _PROBES_AT_ONCE]
        counts: list[tuple[int, int]] = con.execute(
            " UNION ALL ".join(
                f"SELECT {n} AS probe, * FROM ({probe.sql})" for n, probe in enumerate(batch)
            ),
            [param for probe in batch for param in probe.params],
        ).fetchall()
        failed += [batch[n].failed() for n, count in sorted(counts) if not count]
    return failed


@dataclass(frozen=True, slots=True)
class _Answer:
    """An ungrouped `min()` or `max()` (`pick`) of a column that must read `held`: DuckDB reads
    it from the bounds where they say they are exact, in a query of its own (beside an
    aggregate it cannot so answer, it reads the rows for every one)."""

    table: str
    column: str
    pick: str
    held: Any

    def sql(self, n: int) -> str:
        read = f'{self.pick}("{self.column}")'
        same = f"{read} IS NOT DISTINCT FROM ?"
        return f'SELECT {n} AS answer, {same}, {read}::VARCHAR FROM "{self.table}"'


def _exact(bound: Any, value: Any, text: bool) -> bool:
    """The stated bound is the held value itself (not a wider bound, nor a string's first
    bytes): DuckDB answering `min()` or `max()` from it reads the value."""
    if text and isinstance(bound, str) and isinstance(value, str):
        return _bound_bytes(bound) == value.encode()
    return _order(bound) == _order(value)


def _loose(stats: dict[str, Any], held: _Values, text: bool) -> bool:
    """Some bound of `stats` is not the value `held` holds there."""
    return bool(held.values) and not (
        _exact(stats.get("min"), held.low, text) and _exact(stats.get("max"), held.high, text)
    )


def _answered(con: DuckDBPyConnection, answers: list[_Answer]) -> list[Misstated]:
    """The answers DuckDB gives that are not the values held, asked in one statement."""
    if not answers:
        return []
    read: list[tuple[int, bool, str | None]] = con.execute(
        " UNION ALL ".join(answer.sql(n) for n, answer in enumerate(answers)),
        [answer.held for answer in answers],
    ).fetchall()
    return [
        Misstated(
            answers[n].table,
            answers[n].column,
            "the table",
            f"{answers[n].pick}() reads {str(got)[:60]}, the rows hold {answers[n].held!r:.60}",
        )
        for n, same, got in sorted(read)
        if not same
    ]


#: Held while a check reads values with DuckDB's statistics propagation off (`_unpropagated`).
_UNPROPAGATED = threading.Lock()


@contextlib.contextmanager
def _unpropagated(con: DuckDBPyConnection) -> Generator[None]:
    """DuckDB's statistics propagation off while the values are read: with it, `count(c)` is
    read as `count(*)` where the statistics say no NULL, `length(c)` as `strlen(c)` where they
    say ASCII, and an ungrouped `min(c)` from them. The setting is the database's (every
    connection to the file in this process), so it is changed under a lock and put back; a
    query of another connection meanwhile is only planned without it (the same rows)."""
    with _UNPROPAGATED:
        (before,) = con.execute("SELECT current_setting('disabled_optimizers')").fetchone() or ("",)
        con.execute("SET disabled_optimizers = 'statistics_propagation'")
        try:
            yield
        finally:
            quoted = str(before).replace("'", "''")
            con.execute(f"SET disabled_optimizers = '{quoted}'")


@dataclass(frozen=True, slots=True)
class _Held:
    """A table as read with statistics propagation off: what each piece of rows holds, and each
    list column's elements (by list)."""

    #: by piece (None: rows of a transaction not yet stored, which no statistic lists)
    pieces: dict[int | None, list[_Values]]
    elements: dict[int, list[tuple[Any, ...]]]


def _read_table(
    con: DuckDBPyConnection, table: str, columns: list[_Column], pieces: list[int], rows: int
) -> _Held:
    piece, params = _piece_of_row(pieces, rows)
    return _Held(
        {
            row[0]: _read(row, columns)
            for row in con.execute(
                f"SELECT {piece} AS piece, count(*), "
                f"{', '.join(column.aggregates() for column in columns)} "
                f'FROM "{table}" GROUP BY piece',
                params,
            ).fetchall()
        },
        {
            at: con.execute(
                f"SELECT r, count(*), {column.aggregates('e')} FROM "
                f'(SELECT rowid AS r, unnest("{column.name}") AS e FROM "{table}") GROUP BY r'
            ).fetchall()
            for at, column in enumerate(columns)
            if column.listed
        },
    )


@dataclass(slots=True)
class _Checked:
    """What the check found so far, and what it still asks DuckDB."""

    found: list[Misstated]
    probes: list[_Probe]
    answers: list[_Answer]


def _compare(
    table: str,
    columns: list[_Column],
    segments: list[_Segment],
    pieces: list[int],
    stated: tuple[Any, ...],
    held: _Held,
    into: _Checked,
) -> None:
    """Compare a table's listed statistics with what it holds, and note what to ask DuckDB: a
    filter on a greatest value cut at its bound, every bound of a segment updated in memory,
    and the ungrouped `min()` and `max()` of a column some of whose stated bounds are not the
    values themselves (DuckDB reads them from the row groups' or the table's bounds where they
    say they are exact)."""
    asked: set[tuple[int, int, int]] = set()
    loose: set[int] = set()
    for segment in segments:
        start = bisect.bisect_left(pieces, segment.first)
        end = bisect.bisect_left(pieces, segment.first + segment.rows)
        values = _total(
            held.pieces[at][segment.column_id] for at in range(start, end) if at in held.pieces
        )
        column = columns[segment.column_id]
        stats = _as_stats(segment.stats)
        if not segment.updated:
            column.check(into.found, table, segment.where, stats, values, segment.bounded)
        if segment.bounded and _loose(stats, values, column.text):
            loose.add(segment.column_id)
        span = (segment.column_id, segment.first, segment.rows)
        if (segment.updated or cut_high(stats, values)) and span not in asked:
            asked.add(span)  # its values' segment and its NULL flags' may span one range
            rows = (segment.first, segment.first + segment.rows - 1)
            into.probes += _probes(table, column, segment.where, values, rows, segment.updated)
    stored = [parts for at, parts in held.pieces.items() if at is not None]
    for at, column in enumerate(columns):
        total = _total(parts[at] for parts in stored)
        stats = _as_stats(stated[at])
        column.check(into.found, table, "the table", stats, total)
        if cut_high(stats, total):
            into.probes += _probes(table, column, "the table", total, None, everything=False)
        if (
            total.values
            and not column.listed
            and (at in loose or _loose(stats, total, column.text))
        ):
            into.answers += [
                _Answer(table, column.name, "min", total.low),
                _Answer(table, column.name, "max", total.high),
            ]
        if column.listed:
            elements = replace(column, name=f"{column.name}[]", listed=False)
            by_list = _total(_read(row, [elements])[0] for row in held.elements[at])
            elements.check(into.found, table, "the table", stats.get("child_stats"), by_list)


def misstated(
    con: DuckDBPyConnection, tables: Iterable[str] = tuple(spec.name for spec in SPECS)
) -> list[Misstated]:
    """Every column of `tables` (gymflow's) whose statistics, a segment's or the table's,
    exclude a value it holds."""
    described: dict[str, list[tuple[str, str]]] = {}
    for table, name, kind in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = "
        "current_database() AND schema_name = 'main' ORDER BY table_name, column_index"
    ).fetchall():
        described.setdefault(table, []).append((name, kind))
    present = [table for table in tables if table in described]
    if not present:
        return []
    stored: dict[str, list[tuple[Any, ...]]] = {table: [] for table in present}
    for table, *row in con.execute(
        " UNION ALL ".join(
            f"SELECT '{table}' AS t, row_group_id, column_id, column_path, start, count, stats, "
            f"segment_type, has_updates FROM pragma_storage_info('{table}')"
            for table in present
        )
        + " ORDER BY t, row_group_id, column_id, column_path, start"
    ).fetchall():
        stored[table].append(tuple(row))
    layouts = {table: _segments(stored[table]) for table in present}
    read = [table for table in present if layouts[table][0]]
    columns = {
        table: [
            _Column(name, kind.removesuffix("[]") == "VARCHAR", kind.endswith("[]"))
            for name, kind in described[table]
        ]
        for table in read
    }
    pieces = {
        table: sorted({segment.first for segment in layouts[table][0]} | {0}) for table in read
    }
    stated = {
        table: con.execute(
            f'SELECT {", ".join(c.stated for c in columns[table])} FROM "{table}" LIMIT 1'
        ).fetchone()
        for table in read
    }
    with _unpropagated(con):
        held = {
            table: _read_table(con, table, columns[table], pieces[table], layouts[table][1])
            for table in read
            if stated[table] is not None
        }
    checked = _Checked([], [], [])
    for table, table_held in held.items():
        if table_held.pieces:  # else every row deleted: no value for a statistic to exclude
            _compare(
                table,
                columns[table],
                layouts[table][0],
                pieces[table],
                stated[table] or (),
                table_held,
                checked,
            )
    return checked.found + _asked(con, checked.probes) + _answered(con, checked.answers)


def check_statistics(con: DuckDBPyConnection, where: str) -> None:
    """StoreError naming `where` and the columns when a statistic excludes a value held."""
    try:
        found = misstated(con)
    except (duckdb.Error, ValueError, TypeError, OverflowError) as exc:
        raise StoreError(
            f"{where}: its column statistics cannot be read ({exc}); DuckDB answers filters "
            "from them, so it is not read: use the run's original store"
        ) from None
    if found:
        named = "; ".join(str(item) for item in found[:_NAMED])
        more = f" and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
        raise StoreError(
            f"{where}: its column statistics do not describe its values ({named}{more}): "
            "rewritten in the file, and DuckDB answers filters, min() and max() from them, so "
            "every number read from it would follow them; not read: use the run's original "
            "store"
        )
