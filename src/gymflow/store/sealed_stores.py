"""Which stores this machine sealed, and where. Everything in a store can be rewritten together:
seals nulled (or the column dropped) and the seal record deleted read as a store an older gymflow
wrote, a record naming another key over garbled seals as a colleague's store, and both only warn.
What the store cannot hide is where it is: each key keeps, beside the key file, the paths of the
stores it sealed, and a store at one of them that reads as unsealed or foreign had its seals
removed (`stripped`). A store moved to a new path before being stripped is not caught
(docs/advanced/security.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from duckdb import DuckDBPyConnection

from gymflow.store.generations import record_at, recorded_store
from gymflow.store.named_paths import path_names, recorded_names, store_names
from gymflow.store.seal_key import SealKey, SealKeyError, key_file, load_key


def ledger_file() -> Path:
    """The stores this machine's keys sealed: `key id<TAB>store path` lines, owner-only."""
    return key_file().with_name("sealed-stores")


def store_file(con: DuckDBPyConnection) -> str | None:
    """The real path of the store file `con` has open (None: in memory)."""
    names = store_names(con)
    return names[-1] if names else None


#: The ledger's tag of a store sealed under each record version from 3 on: sealed with its
#: rollouts (3), its model calls (4) (`sealed_rows.py`), its generation (5) and its rows' counts
#: (6). A seal record of an older version found there later was put back from another store, to
#: switch their check off.
_LEDGER_TAGS = {3: "rollouts", 4: "calls", 5: "generation", 6: "counts"}


def _entry(key: SealKey, path: str, *, version: int = 0) -> str:
    """A ledger line: the store at `path` sealed by `key`; with a `version` of `_LEDGER_TAGS`,
    sealed under a record of that version."""
    tag = _LEDGER_TAGS.get(version)
    return f"{key.key_id}\t{tag}\t{path}\n" if tag else f"{key.key_id}\t{path}\n"


def remember_store(con: DuckDBPyConnection, key: SealKey, *, version: int = 0) -> None:
    if names := recorded_names(con):
        remember(names[0], key, version=version)


def remember(path: Path | str, key: SealKey, *, version: int = 0) -> None:
    """Record that `key` sealed the store at `path` (its final path: a store built aside and
    renamed into place is recorded where it ends up), once; with `version`, under a seal record
    of that version (a store this gymflow wrote: `RECORD_VERSION`), which seals what every
    version up to it seals. It is listed by its path as named and as it resolves (`path_names`)."""
    ledger = ledger_file()
    lines = [
        entry
        for name in path_names(path)
        for entry in [
            _entry(key, name),
            *(_entry(key, name, version=v) for v in _LEDGER_TAGS if v <= version),
        ]
    ]
    new = [line for line in lines if not _listed(ledger, line)]
    if not new:
        return
    try:
        ledger.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot record the sealed store: {exc.strerror}") from None
    with os.fdopen(fd, "a") as out:  # one short append: whole even beside another writer
        out.write("".join(new))


def remember_copy(source: Path, copy: Path) -> None:
    """A copy of a store this machine's key sealed is recorded as sealed too (a study's arm
    starts from a copy of its base run's store), under the record version the source's was."""
    key = load_key(create=False)
    if key is None:
        return
    ledger, names = ledger_file(), path_names(source)
    if any(_listed(ledger, _entry(key, name)) for name in names):
        remember(copy, key, version=max(_listed_version(ledger, key, name) for name in names))
    # the copy's recorded history is at least the source's, of the same store (one of a source
    # put back is refused as the source is); `db.copy_store` raises the copy above its path's,
    # with an id of its own
    at_source = recorded_store(key, names)
    record_at(key, copy, at_source.number, at_source.store_id)


def _listed_version(ledger: Path, key: SealKey, path: str) -> int:
    """The highest record version the ledger says `key` sealed the store at `path` under (0:
    none of `_LEDGER_TAGS`)."""
    listed = [v for v in _LEDGER_TAGS if _listed(ledger, _entry(key, path, version=v))]
    return max(listed, default=0)


def _listed(ledger: Path, entry: str) -> bool:
    if not ledger.exists():
        return False
    try:
        info = ledger.stat()
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
            raise SealKeyError(f"{ledger}: writable by others or not this user's; refused")
        with ledger.open(encoding="utf-8", errors="replace") as lines:
            return entry in lines
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot read the sealed stores: {exc.strerror}") from None


def remembered(con: DuckDBPyConnection, key: SealKey) -> bool:
    ledger = ledger_file()
    return any(_listed(ledger, _entry(key, name)) for name in store_names(con))


def remembered_version(con: DuckDBPyConnection, key: SealKey) -> int:
    ledger = ledger_file()
    return max((_listed_version(ledger, key, name) for name in store_names(con)), default=0)


def sealed_at(path: Path | str) -> bool:
    """Whether this machine's key sealed the store at `path` there: the ledger lists it by that
    very path (absolute, links not followed). A copy made by hand at a new path is not listed,
    a copy gymflow makes is (`remember_copy`)."""
    key = load_key(create=False)
    return key is not None and _listed(ledger_file(), _entry(key, os.path.abspath(path)))
