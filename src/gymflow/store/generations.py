"""Which sealed state of a store is its latest: the store's generation, and the highest one this
machine's writers took each store path to.

Every state a store passes through is sealed by the owner's key, so an older state of the same
store put back in place passes every check: the bytes copied aside while a lenient what-if
version was current, written back after the owner went back to the original version, read
pass@1 100% for 60%, healthy, `reverify --check` clean (attack pass 4, a07). What tells the
latest state apart is a counter no one without the key can raise:

- `meta.generation` holds a number and a MAC of it together with the store's seal records
  (`BOUND`: the seal record, the task list's, the inputs', the rows' records), rewritten, one
  higher, by every writer that claims the store (`seal.claim`) or writes one of those records
  (`write_generation`), once per transaction, last in it. The record of a newer state copied
  into an older one does not hold over the older one's records.
- Beside the seal key, `store-generations/` keeps per key and store path the highest
  generation a writer committed there (one small file each, rewritten aside and renamed: the
  append-only `sealed-stores` ledger would grow by a line per batch of a run). It is written
  once the writer's transaction committed (`commits.py`): a generation recorded before a
  commit that then failed would make the store read as put back; a writer killed between its
  commit and the record leaves the store one generation ahead of it, which reads as fine.

A store whose generation is below the one recorded for its path is an older copy put back
(`seal.StoreSeal.rolled_back`): health's `seal_rolled_back`, `reverify --check` and profile
(exit 2), and every writer refuses it. A path's recorded generation never goes down: a store
that begins a history at a path starts above what was recorded there, so every store that lived
at that path before, of whatever run, is below it and refused as put back. It reset to the new
store's own number before, and last night's store copied back over tonight's (re-run into the
same folder) read as current: health, `reverify --check` and the regression gate passed
(attack pass 7, s08). A history begins with the first seal of a store at a path (a new run
where an older one was deleted), with rows copied into a store that held none (a merge into a
folder, a retried shard's checkpoints restored: `merge.copy_rows`), with an import renamed into
place (`start_above` its final path) and with a copy gymflow makes of a store (`continue_copy`);
a store copied by hand to a new path has none there, and opens. Which store a path's record is
of is its id (`store_ids.py`), recorded with the generation: a history begun draws a new one.
Stores written before the
generation existed (seal record versions 1 to 4) read as generation 0, and get one with their
next sealed write."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from duckdb import DuckDBPyConnection

from gymflow.core.errors import UserError
from gymflow.core.same_text import same_text
from gymflow.core.user_folders import user_config, write_private
from gymflow.store.commits import Open, open_transaction
from gymflow.store.named_paths import path_names, recorded_names
from gymflow.store.store_ids import STORE_ID_KEY, is_store_id, new_store_id

GENERATION_KEY = "generation"
#: The `meta` records a generation is sealed with: every seal record a writer rewrites.
BOUND = ("seal", "task_seal", "inputs_seal", "unjudged_seal", "rollouts_seal", "calls_seal")
#: Records sealed with it only when present: the verdict set's (`sealed_rows.VERDICTS`) and the
#: store's id (`store_ids.py`), which stores sealed before them lack, their generation sealed
#: without their names. Present, one cannot be removed or replaced (the generation no longer
#: holds over what is left) nor the generation with it (a store sealed under record 5 or later
#: requires one), so no seal record version says it is required: a store without one is one
#: sealed before it, read as before, and given one by its next writer (`seal.claim`).
OPTIONAL = ("verdicts_seal", STORE_ID_KEY)
_LABEL = "gymflow store generation v1\n"
_HEX = 32
#: Digits a generation may have (an int64 holds them): anything longer is no generation.
_MAX_DIGITS = 18


class SealKey(Protocol):
    """What the generation needs of `seal.SealKey` (which imports this module)."""

    @property
    def key_id(self) -> str: ...

    def mac(self, text: str) -> str: ...


class GenerationsError(UserError):
    """The record of store generations beside the seal key cannot be used: not this user's,
    writable by others, or unreadable."""


@dataclass(frozen=True)
class Generation:
    """A store's generation as stored: `number` (0: none stored) and whether its record holds
    over the store's seal records under this key (None: no record)."""

    number: int
    sealed: bool | None


def _stored(con: DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key = ?", [GENERATION_KEY]).fetchone()
    return None if row is None else str(row[0])


def _parsed(text: str) -> tuple[int, str] | None:
    number, _, mac = text.partition(":")
    if not number.isdigit() or len(number) > _MAX_DIGITS:
        return None
    return int(number), mac


def _framed(stored: dict[str, str]) -> str:
    """The seal records among `stored` (`meta` by key), each framed by its length (an absent
    one of `BOUND` by its name alone, of `OPTIONAL` by nothing)."""
    present = "".join(
        f"{name}={len(stored[name])}:{stored[name]}\n" for name in OPTIONAL if name in stored
    )
    return (
        "".join(
            f"{name}\n" if name not in stored else f"{name}={len(stored[name])}:{stored[name]}\n"
            for name in BOUND
        )
        + present
    )


def _bound(con: DuckDBPyConnection) -> str:
    """The seal records as stored (`_framed`)."""
    rows = con.execute(
        "SELECT key, value FROM meta WHERE list_contains(?, key)", [[*BOUND, *OPTIONAL]]
    ).fetchall()
    return _framed({str(name): str(value) for name, value in rows})


def _mac(con: DuckDBPyConnection, key: SealKey, number: int) -> str:
    return key.mac(f"{_LABEL}{number}\n{_bound(con)}")[:_HEX]


def stored_number(con: DuckDBPyConnection) -> int:
    """The store's generation as its record says, unchecked (0: none)."""
    parsed = _parsed(_stored(con) or "")
    return parsed[0] if parsed else 0


def read_generation(con: DuckDBPyConnection, key: SealKey) -> Generation:
    """The store's generation, and whether its record is the one `key` sealed over the seal
    records the store holds now."""
    text = _stored(con)
    if text is None:
        return Generation(0, None)
    parsed = _parsed(text)
    if parsed is None:
        return Generation(0, False)
    number, mac = parsed
    return Generation(number, same_text(mac, _mac(con, key, number)))


@dataclass
class _Pending:
    """The generation a writer's open transaction took its store to, to record once committed."""

    #: the transaction it is written in (`commits.open_transaction`; None: none open, written
    #: and recorded at once)
    transaction: Open | None
    key_id: str = ""
    names: tuple[str, ...] = ()
    number: int = 0
    #: the store begins a history at its path (`fresh_history`): its generation starts above
    #: the one recorded there, and above the one recorded at each of `above`
    fresh: bool = False
    #: paths the store begins a history at besides its own (`start_above`: where an import
    #: built aside is renamed to)
    above: tuple[str, ...] = ()
    #: the store's id (`store_ids.py`), recorded with `number`: a new one when it begins a
    #: history, or held none
    store_id: str | None = None


_pending: weakref.WeakKeyDictionary[DuckDBPyConnection, _Pending] = weakref.WeakKeyDictionary()


def _pending_for(con: DuckDBPyConnection) -> _Pending:
    """The open transaction's pending record (a new one for a new transaction: one that rolled
    back left nothing to record)."""
    current = open_transaction(con)
    try:
        found = _pending.get(con)
        if found is None or found.transaction is not current:
            found = _pending[con] = _Pending(current)
        return found
    except TypeError:  # not weakly referable: recorded now, as outside a transaction
        return _Pending(None)


def fresh_history(con: DuckDBPyConnection) -> None:
    """The store `con` has open begins a history at its path (sealed for the first time, where
    another store may have been before it): the generation its writer commits starts above the
    one recorded there, so every store that lived at that path before reads as put back."""
    _pending_for(con).fresh = True


def start_above(con: DuckDBPyConnection, path: Path | str) -> None:
    """`fresh_history`, for a store built aside that will be renamed to `path` (an import): its
    generation starts above the one recorded at `path` too."""
    pending = _pending_for(con)
    pending.fresh = True
    pending.above = (*pending.above, *path_names(path))


def write_generation(con: DuckDBPyConnection, key: SealKey) -> None:
    """Raise the store's generation by one, sealed over its seal records: what every writer
    does when it claims the store and each time it writes one of them (`BOUND`). Inside a
    `transaction`, once, last in it (over the records as it leaves them: a batch writes
    several), and the path's record once it committed; outside one, now."""
    pending = _pending_for(con)
    if pending.key_id != key.key_id:  # first in this transaction: where it is is read once
        pending.key_id, pending.names = key.key_id, recorded_names(con)
    if pending.transaction is None:
        _write(con, key, pending)
        _flush(con, pending)
        return
    pending.transaction.before["generation"] = lambda: _write(con, key, pending)
    pending.transaction.after["generation"] = lambda: _flush(con, pending)


def _write(con: DuckDBPyConnection, key: SealKey, pending: _Pending) -> None:
    stored = {
        str(name): str(value)
        for name, value in con.execute(
            "SELECT key, value FROM meta WHERE list_contains(?, key)",
            [[*BOUND, *OPTIONAL, GENERATION_KEY]],
        ).fetchall()
    }
    parsed = _parsed(stored.get(GENERATION_KEY, ""))
    floor = 0
    if pending.fresh:  # read now, in the transaction: a record another writer made since counts
        floor = max(
            (
                _read(_file(pending.key_id, name), name).number
                for name in (*pending.names, *pending.above)
            ),
            default=0,
        )
    pending.number = max(parsed[0] if parsed else 0, floor) + 1
    # a new id where the store begins a history, holds none, or holds another than its path's
    # record (a copy made by hand, first written at its new path: its history and the
    # original's part here, so neither can be put in the other's place)
    held = stored.get(STORE_ID_KEY)
    if pending.fresh or held is None or (held,) != recorded_store(key, pending.names).store_ids:
        stored[STORE_ID_KEY] = new_store_id()
        con.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [STORE_ID_KEY, stored[STORE_ID_KEY]],
        )
    pending.store_id = stored[STORE_ID_KEY]
    mac = key.mac(f"{_LABEL}{pending.number}\n{_framed(stored)}")[:_HEX]
    con.execute(
        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [GENERATION_KEY, f"{pending.number}:{mac}"],
    )


def _flush(con: DuckDBPyConnection, pending: _Pending) -> None:
    with contextlib.suppress(TypeError, KeyError):
        del _pending[con]
    for name in pending.names:
        _record(pending.key_id, name, Recorded(pending.number, pending.store_id))


def folder() -> Path:
    """`store-generations/` beside the seal key: one file per key and store path."""
    return user_config("store-generations")


def _file(key_id: str, path: str) -> Path:
    return folder() / hashlib.sha256(f"{key_id}\0{path}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Recorded:
    """What this machine's writers recorded for a store path: the highest generation they took
    the store there to (0: none), and that store's id (`store_ids.py`; None: none recorded, a
    record from before ids or none at all)."""

    number: int
    store_id: str | None = None
    #: every store id recorded at the names a store is reached by (`recorded_store`: its path as
    #: named and as it resolves), distinct, as named first: the store must be the one recorded
    #: at each (`store_ids.another_store`)
    store_ids: tuple[str, ...] = ()


def _parse(file: Path) -> tuple[Recorded, str]:
    """What `file` records, `number[:store id]<TAB>path`, and the path it names ("": none)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Recorded(0), ""
    except OSError as exc:
        raise GenerationsError(f"{file}: cannot read the store's generation: {exc}") from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as opened:
        info = os.fstat(opened.fileno())
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.geteuid()
            or stat.S_IMODE(info.st_mode) & 0o022
        ):
            raise GenerationsError(f"{file}: writable by others or not this user's; refused")
        head, _, named = opened.read(4096).rstrip("\n").partition("\t")
    number, _, store_id = head.partition(":")
    if not number.isdigit() or len(number) > _MAX_DIGITS:
        return Recorded(0), ""
    found = store_id if is_store_id(store_id) else None
    return Recorded(int(number), found, (found,) if found else ()), named


def _read(file: Path, path: str) -> Recorded:
    """What `file` records for the store at `path` (nothing, if it names another path)."""
    record, named = _parse(file)
    return record if named == path else Recorded(0)


def _record(key_id: str, path: str, record: Recorded) -> None:
    """`record` kept for the store at `path`, unless a generation as high is already: a path's
    recorded generation never goes down, and the store recorded with it is the one its writer
    last took there."""
    file = _file(key_id, path)
    if _read(file, path).number >= record.number:
        return
    head = f"{record.number}:{record.store_id}" if record.store_id else str(record.number)
    try:
        write_private(file, f"{head}\t{path}\n")
    except OSError as exc:
        raise GenerationsError(f"{file}: cannot record the store's generation: {exc}") from None


def recorded(key: SealKey, names: tuple[str, ...]) -> int:
    """The highest generation this machine's writers took the store at any of `names` to."""
    return recorded_store(key, names).number


def recorded_store(key: SealKey, names: tuple[str, ...]) -> Recorded:
    """What this machine's writers recorded for the store at any of `names` (the names of one
    path): the record with the highest generation, with the ids recorded at every name. A link
    put at a sealed store's path names two paths: the record of the one it points to (another
    of the owner's stores, its generation raised by a routine writer) outvoted the path's own,
    and the link read as the run sealed there (attacker's pass 9, A1)."""
    found = [_read(_file(key.key_id, name), name) for name in names]
    best = max(found, key=lambda record: record.number, default=Recorded(0))
    ids = tuple(dict.fromkeys(i for record in found for i in record.store_ids))
    return replace(best, store_ids=ids)


def recorded_elsewhere(key: SealKey, store_id: str, names: tuple[str, ...]) -> list[str]:
    """The store paths, other than `names`, at which this machine's writers last recorded the
    store `store_id`: a scan of the key's records, asked only of a run continued at a path that
    has no record of its own (`store/runs.py`)."""
    records = folder()
    if not records.is_dir():
        return []
    found: list[str] = []
    for file in sorted(records.iterdir()):
        if file.name.startswith("."):  # a record being written (`write_private`)
            continue
        record, named = _parse(file)
        mine = named and _file(key.key_id, named) == file  # this key's record of that path
        if mine and named not in names and store_id in record.store_ids:
            found.append(named)
    return found


def recorded_at(key: SealKey, path: Path | str) -> int:
    """`recorded` for the store at `path` (as named and as it resolves)."""
    return recorded(key, path_names(path))


def recorded_store_at(key: SealKey, path: Path | str) -> Recorded:
    """`recorded_store` for the store at `path` (as named and as it resolves)."""
    return recorded_store(key, path_names(path))


def record_at(key: SealKey, path: Path | str, number: int, store_id: str | None = None) -> None:
    """The store at `path` reached generation `number`, holding `store_id` (where a writer's own
    transaction did not record it: a store gymflow built aside and renamed there, an import; a
    copy's history recorded before the copy begins its own); a higher one already recorded
    stays."""
    for name in path_names(path):
        _record(key.key_id, name, Recorded(number, store_id))


def continue_copy(con: DuckDBPyConnection, key: SealKey, source: Path | str) -> None:
    """The copy `con` has open, just made by gymflow of the store at `source` (a study's arm, a
    confirmation), begins a history at its own path: its generation is raised above the one
    recorded there (an earlier copy a writer took further), so it opens, and every store that
    lived there before reads as put back. Only for a source at its latest state: one whose
    generation record `key` did not seal over its seal records, or that is below the one
    recorded at its own path (an older state put back), is left as it is, and its copy is
    refused as the source is. In the caller's transaction."""
    found = read_generation(con, key)
    if found.sealed is True and found.number >= recorded_at(key, source):
        fresh_history(con)
        write_generation(con, key)
