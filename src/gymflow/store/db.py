"""Opening a run store: schema creation, version checks, and clear errors for broken files."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from gymflow.core.errors import RuntimeFailure, UserError, option
from gymflow.core.written import created, unlinked_folder, written
from gymflow.store.commits import transaction as transaction
from gymflow.store.exact_schema import differences
from gymflow.store.memory_bound import analysis_memory, check_text_at_once, refused_out_of_memory
from gymflow.store.named_paths import name as _name
from gymflow.store.schema import ADDED_COLUMNS, SCHEMA_VERSION, SPECS, TABLES
from gymflow.store.stored_values import (
    check_large_text,
    check_small_tables,
    longest_texts,
    named_bad_values,
    store_name,
)

STORE_FILE = "gymflow.duckdb"


#: How long a writer waits for a store another process holds (a `gym eval profile` that opened
#: it just before the run started, a report being written), and how long a reader waits for a
#: writer, backing off from LOCK_FIRST_WAIT_S. Once collecting, a run holds its store to the
#: end (`held`), so these waits are only ever for the moment it opens.
WRITER_LOCK_WAIT_S = 10.0
READER_LOCK_WAIT_S = 5.0
LOCK_FIRST_WAIT_S = 0.05


class StoreError(UserError):
    """A store the user named that is not what the command needs: no store at that path, a file
    that is not a gymflow store (or of another schema version, or truncated), a store of another
    run or benchmark version. Nothing was written; another path or file fixes it."""


class StoreFailure(RuntimeFailure):
    """The store failed while a command ran: a commit (disk full, a file size limit), a shard
    attached for the merge, or another process holding it for longer than waited. What was
    committed is kept; once the cause is gone, a retry (`--resume`) continues."""


class StoreBusy(StoreFailure):
    """Another process holds the store (a run writing it, or a reader) for longer than waited."""


def _holder(exc: duckdb.Error) -> str | None:
    """The PID DuckDB names in a lock conflict, or None when the error is not one."""
    text = str(exc)
    if "Could not set lock" not in text and "Conflicting lock" not in text:
        return None
    found = re.search(r"PID (\d+)", text)
    return found.group(1) if found else "another process"


#: The file each connection's database is open on, as DuckDB opened it: its descriptor, device
#: and inode (`opened_file`). A path names whatever was put there since (a run folder swapped
#: while a reader opened it); the descriptor is the file DuckDB reads.
_opened: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, tuple[int, int, int]] = (
    weakref.WeakKeyDictionary()
)


def _open_files(name: str) -> set[tuple[int, int, int]]:
    """The regular files named `name` this process has open: (descriptor, device, inode)."""
    try:
        listing = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # no /proc: nothing is known of the file opened, so nothing is vouched for
        return set()
    try:
        names = os.listdir(listing)
    finally:
        os.close(listing)
    found: set[tuple[int, int, int]] = set()
    for fd in names:
        try:
            info = os.fstat(int(fd))
            opened_as = os.readlink(f"/proc/self/fd/{fd}")
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(info.st_mode) and os.path.basename(opened_as) == name:
            found.add((int(fd), info.st_dev, info.st_ino))
    return found


#: What a DuckDB database file holds after its header's checksum (8 bytes).
DUCKDB_MAGIC = b"DUCK"
#: A DuckDB file's headers before its first block: the main header and two database headers.
_HEADERS_BYTES = 3 * 4096
#: gymflow's stores need no extension DuckDB would fetch: a SQLite file named as a store made it
#: try to download `sqlite_scanner` over the network (attack pass 5, s09).
_NO_EXTENSIONS: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


def without_progress_bar(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """`con` with DuckDB's progress bar off: DuckDB prints it on stdout, a pipe too, for a query
    past 2 s, so `gym eval profile --json` of a large store began with "100%". It is a
    connection's setting (DuckDB refuses it in a database's config); cursors take it."""
    con.execute("SET enable_progress_bar = false")
    return con


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, noting the one file of the store's name it opened (`_opened`). A
    read-only DuckDB replays a WAL and closes it; it keeps only the database file open. Files
    another thread opens meanwhile (a /proc file a watchdog reads) have other names; where two
    are new, or the one opened was renamed already, none is noted, and nothing is vouched for."""
    before = _open_files(path.name)
    con = without_progress_bar(
        duckdb.connect(str(path), read_only=read_only, config=_NO_EXTENSIONS)
    )
    files = _open_files(path.name) - before
    if len(files) == 1:
        _opened[con] = files.pop()
    return con


def opened_file(con: duckdb.DuckDBPyConnection) -> int | None:
    """The descriptor of the database file DuckDB opened for `con` (a connection `connect`
    made), while it is still that file; None when unknown (a cursor, an in-memory store)."""
    try:
        noted = _opened.get(con)
    except TypeError:  # not weakly referable: not a connection `connect` made
        return None
    if noted is None:
        return None
    fd, device, inode = noted
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return fd if (info.st_dev, info.st_ino) == (device, inode) else None


def _open(path: Path, read_only: bool):
    """duckdb.connect, waiting with backoff while another process holds the file."""
    deadline = time.monotonic() + (READER_LOCK_WAIT_S if read_only else WRITER_LOCK_WAIT_S)
    wait = LOCK_FIRST_WAIT_S
    while True:
        try:
            return _connect(path, read_only)
        except duckdb.IOException as exc:
            holder = _holder(exc)
            if holder is None:
                raise
            if time.monotonic() + wait > deadline:
                if read_only:
                    raise StoreBusy(
                        f"{path}: a run is writing this store right now (PID {holder}); what it "
                        "committed can be read between its batches: try again in a moment, or "
                        "when the run finishes"
                    ) from None
                raise StoreBusy(
                    f"{path}: held by PID {holder} for over {WRITER_LOCK_WAIT_S:.0f}s (a reader "
                    f"left open?); close it, then continue the run ({option('resume')})"
                ) from None
            time.sleep(wait)
            wait = min(wait * 2, 0.25)


#: Stores this process holds open for a whole collection (`held`), by resolved path.
_held: dict[Path, duckdb.DuckDBPyConnection] = {}
_held_lock = threading.Lock()


@contextlib.contextmanager
def held(run_dir: Path | str) -> Iterator[None]:
    """Keep the store open for writing while inside: every `connect` to it in this process is
    a cursor of this one connection, so a run's batches never give the lock up between them
    and no other process (a reader) can take it half-way; readers are told the run is writing."""
    path = store_path(run_dir).resolve()
    con = connect(run_dir, create=True)
    with _held_lock:
        _held[path] = con
    try:
        yield
    finally:
        with _held_lock:
            del _held[path]
        con.close()


def _memory_limit(con) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchone()[0]


@functools.cache
def _default_memory_limit() -> str:
    with duckdb.connect() as fresh:  # an in-memory database has the default limit
        return _memory_limit(fresh)


@contextlib.contextmanager
def memory_capped(con, limit: str | None = None) -> Iterator[None]:
    """DuckDB's memory limit set to `limit` (the analysis bound, `memory_bound.
    analysis_memory()`, unless given) while inside, then RESET (the setting is the
    database's, shared by every cursor of it); inside another cap, or where somebody chose a
    limit already (the collector's while it writes), nothing changes: a chosen limit wins, and
    DuckDB prints one rounded, so setting it back would shrink it a little each time."""

    untouched = _memory_limit(con) == _default_memory_limit()
    if untouched:
        con.execute(f"SET memory_limit = '{limit or analysis_memory()}'")
    try:
        yield
    finally:
        if untouched:
            con.execute("RESET memory_limit")


def memory_capped_call(fn):
    """`fn(con, ...)` run under `memory_capped(con)`: an analysis that reads a whole store and
    writes nothing to it, or writes in transactions that an error rolls back. Where DuckDB
    cannot do it within the cap (what it cannot spill) it is refused (`memory_bound.
    StoreOverMemory`, naming the store), never run again without the cap: what a store holds
    is anyone's, and 30 values of 60 MB took health to 6.9 GB that way (attack pass 7, s06). A
    value DuckDB cannot read is named (`stored_values.named_bad_values`)."""

    @functools.wraps(fn)
    @named_bad_values
    def capped(con: duckdb.DuckDBPyConnection, *args: Any, **kwargs: Any):
        try:
            with memory_capped(con):
                return fn(con, *args, **kwargs)
        except duckdb.OutOfMemoryException as exc:
            raise refused_out_of_memory(store_name(con), exc) from None

    return capped


def first_sql(value: str, order: str, n: int) -> str:
    """SQL aggregate: the `n` values of `value` whose `order` is smallest, in that order (NULL
    over no rows): `list(value ORDER BY order)[1:n]` without sorting every row to keep a few
    (five examples of 2.3 million rollouts took 1.3 s that way, 0.4 s this way)."""
    return f"min_by({value}, {order}, {int(n)})" if n > 0 else "[]"


#: The rows a grouped table keeps as its examples, in the order examples are taken.
FIRST_ROLLOUTS = "{'task_id': task_id, 'repeat_index': repeat_index, 'rollout_id': rollout_id}"


def first_rollouts_sql(n: int) -> str:
    """SQL aggregate over rollouts: the first `n` (by task, repeat, id) as FIRST_ROLLOUTS
    structs, for a grouped table whose groups `merged_first_sql` merges later."""
    return first_sql(FIRST_ROLLOUTS, FIRST_ROLLOUTS, n)


def merged_first_sql(column: str, n: int) -> str:
    """SQL aggregate over groups, each holding `first_rollouts_sql`'s list in `column`: the ids
    of the first `n` rollouts of them all, as `first_sql` over the rollouts themselves gives
    them (a group's first n hold the whole's first n that fall in it)."""
    if n <= 0:
        return "[]"
    return f"list_transform(list_sort(flatten(list({column})))[1:{int(n)}], lambda e: e.rollout_id)"


def copy_store(source: Path | str, run_dir: Path | str) -> Path:
    """Copy a closed store into `run_dir`, replacing the one there in one rename (a copy taken
    again after the source grew must not be half old). The copy is recorded as sealed where the
    source is, and begins a history at its path (`generations.continue_copy`)."""
    # the seal's modules (pyarrow): not on every open
    from gymflow.store.generations import continue_copy
    from gymflow.store.seal_key import load_key
    from gymflow.store.sealed_stores import remember_copy

    target = store_path(run_dir)
    with written(target) as (partial,):
        copy_data(store_path(source), partial)
    remember_copy(store_path(source), target)
    if (key := load_key(create=False)) is not None:
        con = connect(target)
        try:
            with transaction(con):
                continue_copy(con, key, store_path(source))
        finally:
            con.close()
    return target


def store_path(run_dir: Path | str) -> Path:
    path = Path(run_dir)
    return path if path.suffix == ".duckdb" else path / STORE_FILE


#: Bytes a store copy reads and writes at once.
COPY_CHUNK = 8 << 20


def refuse_other_wal(path: Path) -> None:
    """StoreError unless the write-ahead log DuckDB derives from the store's name, if any, is a
    regular file with no other name (lstat: a link is not followed). A link there had the next
    writer write its log into whatever it named (the seal key, another run's store), a FIFO
    there hung every reader (attack pass 6, s12)."""
    wal = path.with_name(path.name + ".wal")
    try:
        log = os.lstat(wal)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(log.st_mode) or log.st_nlink != 1:
        raise StoreError(
            f"{wal}: not a write-ahead log gymflow's store wrote (a link, FIFO, device, folder or "
            "a file with other names): DuckDB would read or write through it; remove it"
        )


def _refuse_other_files(path: Path, *, writing: bool) -> None:
    """StoreError unless `path` is a regular file that begins as a DuckDB database does, beside
    a write-ahead log of its own (`refuse_other_wal`). A FIFO never answers DuckDB's read (`gym
    eval health`, and `gym runs list` of its root, waited forever), and a SQLite file made
    DuckDB reach for an extension (attack pass 5, s09). A writer also refuses a store file that
    is a link or has other names: its writes would land in another run's store."""
    refuse_other_wal(path)
    if writing:
        own = os.lstat(path)
        if not stat.S_ISREG(own.st_mode) or own.st_nlink != 1:
            raise StoreError(
                f"{path}: a link, or a file with other names: writing it would write another "
                "file; copy the store into a folder of its own to write it"
            )
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise StoreError(f"{path}: not a regular file (a folder, FIFO or device): no store here")
    with path.open("rb") as file:
        magic = file.read(len(DUCKDB_MAGIC) + 8)[8:]
    if magic != DUCKDB_MAGIC:
        raise StoreError(f"{path}: not a DuckDB database (empty, or another format): no store here")


def _refuse_a_longer_file(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """StoreError when the file is longer than the database DuckDB found in it allows (its
    headers, its blocks, as much again for a checkpoint a kill cut short, and 64 MiB). A tail
    that takes no disk (`truncate -s +16G`) opened as if it were not there, and the digest of
    every seal check read it whole: health 3.8 s -> 143 s (attack pass 6, s17)."""
    total, block = con.execute(
        "SELECT total_blocks, block_size FROM pragma_database_size() "
        "WHERE database_name = current_database()"
    ).fetchone() or (0, 0)
    database = _HEADERS_BYTES + int(total) * int(block)
    size = os.stat(path).st_size
    if size > 2 * database + (64 << 20):
        raise StoreError(
            f"{path}: {size:,} bytes, for a database of {database:,}: bytes after the database's "
            "end (a file extended by hand?); not opened"
        )


def copy_data(source: Path, target: Path) -> None:
    """Copy the regular file `source` to `target` (created, owner-only), its holes left holes:
    the bytes written are the data `source` holds, whatever length it claims (a shard store's
    16 GB tail of nothing was written out in full by `shutil.copyfile`, attack pass 6, s17). A
    `source` that is not a regular file (a FIFO, a device) is StoreError, before any read."""
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{source}: not a regular file (a folder, FIFO or device)")
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for start, end in _data_extents(fd, info.st_size):
                at = start
                while at < end and (chunk := os.pread(fd, min(COPY_CHUNK, end - at), at)):
                    os.pwrite(out, chunk, at)
                    at += len(chunk)
            os.ftruncate(out, info.st_size)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) ranges of `fd` that hold data (SEEK_DATA and SEEK_HOLE; the whole file
    where the file system cannot say)."""
    extents: list[tuple[int, int]] = []
    at = 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after `at`: the rest is a hole
                break
            if exc.errno == errno.EINVAL:  # the file system does not tell holes apart
                return [(0, size)]
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        extents.append((start, end))
        at = end
    return extents


def connect(run_dir: Path | str, *, create: bool = False, read_only: bool = False):
    """Open the store of a run directory. `create` makes the directory and schema if absent.
    A store opened for writing in a run folder that is a link is refused (WriteError): DuckDB
    would write wherever the link points (`core.written`)."""
    path = store_path(run_dir)
    if not read_only:
        unlinked_folder(path.parent)
    if (holder := _held.get(path.resolve())) is not None:
        return _name(holder.cursor(), path)
    made = None
    if not path.exists():
        if not create:
            raise StoreError(f"{path}: no gymflow store here (run `gym eval run` first?)")
        try:
            made = _create(path)
        except duckdb.Error as exc:
            raise StoreError(f"{path}: cannot create the store: {exc}") from None
    _refuse_other_files(path, writing=not read_only)
    try:
        con = _open(path, read_only and path.exists())
    except duckdb.IOException as exc:
        raise StoreError(f"{path}: cannot open store: {exc}") from None
    except duckdb.Error as exc:
        raise StoreError(
            f"{path}: not a readable DuckDB store (truncated or corrupt?): {exc}"
        ) from None
    try:
        # The file `_create` just built (DuckDB opened that device and inode) holds gymflow's
        # schema and nothing else: the checks and the schema's statements (46 of 114 CPU ms
        # of making a store, at load 7) are for a file from anyone, as every later open's is.
        if made is None or _opened.get(con, (None,))[1:] != made:
            _refuse_a_longer_file(con, path)
            _refuse_foreign_objects(con, path)
            _refuse_other_schema(con, path)
            if read_only:
                _check_version(con, path)
                _stand_in_for_new_tables(con)
            else:
                _schema(con, path)
        check_small_tables(con, str(path))
        longest = longest_texts(con)
        check_large_text(con, str(path), longest)
        check_text_at_once(con, str(path), longest)
    except BaseException:
        con.close()
        raise
    return _name(con, path)


#: What a store holds that gymflow did not create, in one query (about 20 ms on an idle
#: machine, nearly all of it duckdb_functions() listing DuckDB's own ~3,300). Every name is
#: qualified with `system.main`: the store's own `current_database()` or `duckdb_views()`
#: macro would otherwise answer in place of DuckDB's, and hide the rest.
_FOREIGN_OBJECTS = """
    WITH here AS (SELECT system.main.current_database() AS db)
    SELECT function_type, schema_name, function_name FROM system.main.duckdb_functions()
        WHERE database_name = (SELECT db FROM here) AND NOT internal
    UNION ALL SELECT 'view', schema_name, view_name FROM system.main.duckdb_views()
        WHERE database_name = (SELECT db FROM here) AND NOT internal
    UNION ALL SELECT 'sequence', schema_name, sequence_name FROM system.main.duckdb_sequences()
        WHERE database_name = (SELECT db FROM here)
    UNION ALL SELECT 'type', schema_name, type_name FROM system.main.duckdb_types()
        WHERE database_name = (SELECT db FROM here) AND NOT internal
    UNION ALL SELECT 'index', schema_name, index_name FROM system.main.duckdb_indexes()
        WHERE database_name = (SELECT db FROM here)
    UNION ALL SELECT 'trigger', schema_name, trigger_name FROM system.main.duckdb_triggers()
        WHERE database_name = (SELECT db FROM here)
    UNION ALL SELECT 'schema', schema_name, schema_name FROM system.main.duckdb_schemas()
        WHERE database_name = (SELECT db FROM here) AND schema_name <> 'main'
    UNION ALL SELECT 'table', schema_name, table_name FROM system.main.duckdb_tables()
        WHERE database_name = (SELECT db FROM here)
        AND NOT (schema_name = 'main' AND system.main.list_contains(?, table_name))
    ORDER BY 1, 2, 3
"""
#: Objects an error names at most (a store could hold thousands).
_FOREIGN_NAMED = 10


def _refuse_foreign_objects(con, path: Path) -> None:
    """A store holding anything gymflow does not create is refused, on every connection (the
    writers' as the readers'), before any of gymflow's SQL runs on it. A DuckDB file keeps
    macros, views, sequences and tables of its own: a macro named as a built-in (`CREATE MACRO
    sum(x) AS count(x)`, a table macro `read_parquet`) replaced DuckDB's function in gymflow's
    SQL, for a collector, reverify or merge writing the store too; a view reads whatever its
    definition reads (a local file) wherever the store is opened; a trigger (DuckDB 2) runs its
    statement in gymflow's writes (an insert of rollouts that set every verdict passed). None
    of them is data a run wrote, so nothing is lost by refusing; the message names each object
    to drop."""
    found = con.execute(_FOREIGN_OBJECTS, [[spec.name for spec in SPECS]]).fetchall()
    if not found:
        return
    named = [
        f"{kind.replace('_', ' ')} {name!r}"
        if schema == "main" or kind == "schema"
        else f"{kind.replace('_', ' ')} {schema + '.' + name!r}"
        for kind, schema, name in found[:_FOREIGN_NAMED]
    ]
    more = f" and {len(found) - _FOREIGN_NAMED} more" if len(found) > _FOREIGN_NAMED else ""
    raise StoreError(
        f"{path}: holds objects gymflow did not create ({', '.join(named)}{more}); a store's "
        "own macros, views, tables and triggers would replace DuckDB's functions or gymflow's "
        "tables in its SQL or run in its writes, so it is not opened: drop them (DROP MACRO "
        "..., DROP VIEW ..., DROP TRIGGER ...) or use the run's original store"
    )


def _refuse_other_schema(con, path: Path) -> None:
    """A gymflow table that is not exactly gymflow's (a generated column, a default, a column
    of another type or place, a constraint) is refused, on every connection, before any of
    gymflow's SQL runs on it (`store/exact_schema.py`). Nothing is written."""
    found = differences(con)
    if found:
        raise StoreError(
            f"{path}: not gymflow's schema: {'; '.join(found)}; a table's own expressions "
            "would run in gymflow's statements, so it is not opened: use the run's original store"
        )


def _create(path: Path) -> tuple[int, int]:
    """A new store with its schema, built aside and then given its name (gymflow.core.written);
    the file's device and inode."""
    with created(path) as partial:
        con = _open(partial, False)
        try:
            _schema(con, partial)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        info = partial.stat()
    return info.st_dev, info.st_ino


def _schema(con, path: Path) -> None:
    for ddl in (*TABLES.values(), *ADDED_COLUMNS):
        con.execute(ddl)
    stored = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if stored is None:
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    else:
        _check_version(con, path)
    # The DuckDB that wrote the file last: an older release cannot read what a newer one wrote,
    # so a store that will not open elsewhere says which DuckDB it needs.
    written_by = con.execute("SELECT value FROM meta WHERE key = 'duckdb_version'").fetchone()
    if written_by is None or written_by[0] != duckdb.__version__:
        con.execute(
            "INSERT INTO meta VALUES ('duckdb_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [duckdb.__version__],
        )


def _stand_in_for_new_tables(con) -> None:
    """A store written before a table existed (`tool_lists`) or a column (`verifications.seal`)
    gets it when opened for writing; read-only, an empty temporary table of that name stands
    in, or a temporary view of the table with the column NULL, so every reader's SQL runs."""
    database = con.execute("SELECT current_database()").fetchone()[0]
    present: dict[str, set[str]] = {}
    for table, column in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() "
        "WHERE database_name = current_database()"
    ).fetchall():
        present.setdefault(table, set()).add(column)
    for spec in SPECS:
        if spec.name not in present:
            con.execute(spec.create(temporary=True))
            continue
        missing = [c for c in spec.columns if c.added and c.name not in present[spec.name]]
        if missing:
            nulls = ", ".join(f"NULL::{c.type} AS {c.name}" for c in missing)
            source = '"' + database.replace('"', '""') + f'".main.{spec.name}'
            con.execute(f"CREATE TEMP VIEW {spec.name} AS SELECT *, {nulls} FROM {source}")


def _check_version(con, path: Path) -> None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:
        raise StoreError(
            f"{path}: a DuckDB file, but not a gymflow store (no meta table)"
        ) from None
    if row is None or row[0] != str(SCHEMA_VERSION):
        found = row[0] if row else "none"
        raise StoreError(
            f"{path}: store schema version {found}, this gymflow reads {SCHEMA_VERSION}"
        )
