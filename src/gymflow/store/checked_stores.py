"""The seal checked once per store state: after every verdict's seal was recomputed and matched,
the store's file state and a digest of its bytes are recorded beside the seal key, so a later
read of the same file skips the recompute (19 of health's 36 s at ten million rollouts) and says
when it was checked.

The state is what Git's index compares to decide whether to hash a file again (device, inode,
size, modification and change time in nanoseconds), taken from the file DuckDB has open (its
descriptor, `db.opened_file`), never from the path: a run folder swapped for a forged copy
while a reader opened it, and swapped back before a stat of the path, gave the original's state
to the forged file read (attacker's pass over 84b21e2). The state alone is not a proof of the
content either: a write through a shared memory map whose pages were already dirty moves
neither time, even after msync. So the record also holds the SHA-256 of the file's bytes, read
through the same descriptor, and the shortcut is taken only when both match. At one million
rollouts the digest costs 0.23 CPU s of the 4.3 s the recompute does (263 MB): the file is read
once, as the recompute reads nearly all of it anyway. A store with a WAL (a writer's commits not
yet checkpointed, or a WAL a read-only open replayed) is checked in full: a read-only DuckDB
replays a WAL and closes it, so what it read cannot be bound to a file.

Only a check records: a writer does not record the file it leaves. DuckDB's lock is advisory,
so bytes another process wrote into the file while a writer held it (a row group the writer did
not touch) stay through its checkpoint; a record the writer made of the file's digest vouched
for them, and the forged verdicts read as healthy (attacker's pass over 85efcb0). The first read
after a write checks in full. The column statistics' check reads nothing but the bytes, so it
is taken from a record of the same bytes at any path (`statistics_checked`): a copy of a
checked store has its seals recomputed (its path and this machine's records decide them), not
its statistics.

What this cannot see: a writer changing the file while a reader reads it (DuckDB reads blocks
when a query needs them, after any check), which the full check shares. A record is written
only when the state and digest taken before the recompute are those after it.

The record (`checked-stores`, owner-only, beside the key file) holds one line per store path:
its state and digest, when it was checked and a MAC of all three under the seal key, so a line
forged or copied between paths by whoever can write that folder's files is not taken. `reverify
--check`, the regression gate and `gym eval health --verify-seals` always recompute."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duckdb import DuckDBPyConnection

from gymflow.store.arrow_reads import joined_strings
from gymflow.store.db import opened_file
from gymflow.store.seal import SealCheck, armed_state, check_seals
from gymflow.store.seal_key import SealKey, SealKeyError, key_file, load_key
from gymflow.store.sealed_stores import store_file

#: Stores remembered at most (the oldest checks are forgotten first).
MAX_REMEMBERED = 2000
#: Bytes read at once for the digest.
DIGEST_READ = 8 << 20


def record_file() -> Path:
    return key_file().with_name("checked-stores")


def _state_text(info: os.stat_result) -> str:
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


def file_state(path: Path | str) -> str | None:
    """The state of the file at `path` (None: not a regular file): a record is written only
    while the file at its path is in the state checked (`record_checked`)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return _state_text(info) if stat.S_ISREG(info.st_mode) else None


def digest(fd: int) -> str:
    """SHA-256 of the bytes of the open file `fd` (read with pread: DuckDB's offset is its own)."""
    found, at = hashlib.sha256(), 0
    while chunk := os.pread(fd, DIGEST_READ, at):
        found.update(chunk)
        at += len(chunk)
    return found.hexdigest()


def file_digest(path: Path | str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return digest(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Opened:
    """The database file DuckDB has open for a connection: its descriptor and state."""

    fd: int
    state: str

    def digest(self) -> str:
        return digest(self.fd)


def opened(con: DuckDBPyConnection) -> Opened | None:
    """The file `con`'s database is read from, when one file holds all of it: None for a
    connection whose file is unknown (a cursor), or when a WAL was replayed into what it reads
    or lies beside the file (its commits are not in the file's bytes)."""
    fd = opened_file(con)
    path = store_file(con)
    if fd is None or path is None or os.path.lexists(f"{path}.wal"):
        return None
    wal = con.execute(
        "SELECT wal_size FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchone()
    if wal is None or str(wal[0]).split()[0] != "0":
        return None
    return Opened(fd, _state_text(os.fstat(fd)))


@dataclass(frozen=True, slots=True)
class Checked:
    """A store whose seals were all recomputed and matched, in this file state and content."""

    path: str
    state: str
    #: SHA-256 of the file's bytes then (`digest`)
    content: str
    #: seconds since the epoch
    checked_at: float

    def mac(self, key: SealKey) -> str:
        # the version names what a full check checks: raised with each check added (v3: the
        # column statistics), so a file an older gymflow checked is checked again in full
        return key.mac(
            f"gymflow checked store v3\n{self.path}\n{self.state}\n{self.content}\n"
            f"{self.checked_at!r}"
        )


def _read(ledger: Path) -> dict[str, dict[str, Any]]:
    if not ledger.exists():
        return {}
    try:
        info = ledger.stat()
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise SealKeyError(f"{ledger}: readable or writable by others, or not this user's")
        entries = {}
        with ledger.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    entry = json.loads(line)
                    entries[str(entry["path"])] = entry
                except (ValueError, KeyError, TypeError):
                    continue  # a torn or foreign line is no record: the store is checked again
        return entries
    except OSError as exc:
        raise SealKeyError(f"{ledger}: cannot read the checked stores: {exc.strerror}") from None


def _valid(entry: dict[str, Any], key: SealKey) -> Checked | None:
    """A line of the record, if its MAC holds under `key`."""
    try:
        found = Checked(
            str(entry["path"]), str(entry["state"]), str(entry["content"]),
            float(entry["checked_at"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(entry.get("mac"), str) or entry["mac"] != found.mac(key):
        return None
    return found


def _statistics_passed(entries: dict[str, dict[str, Any]], content: str, key: SealKey) -> bool:
    """A file with bytes of digest `content` passed a full check, at any path (`entries`, the
    record as `_read` gives it): the column statistics' check (`column_statistics.py`) reads
    nothing but the file's bytes, so a copy of a checked store (an honest run copied to
    compare, a shard's snapshot) is not checked again; its seals, which its path and this
    machine's records decide, are."""
    return any(
        entry.get("content") == content and _valid(entry, key) is not None
        for entry in entries.values()
    )


def statistics_checked(con: DuckDBPyConnection, key: SealKey) -> bool:
    """The bytes of the file `con` reads passed the column statistics' check before (False when
    the file is not known: a WAL beside it, or a cursor)."""
    now = opened(con)
    return now is not None and _statistics_passed(_read(record_file()), now.digest(), key)


def _checked_at(
    con: DuckDBPyConnection, key: SealKey, entries: dict[str, dict[str, Any]]
) -> float | None:
    """When the store `con` has open had every seal checked (`entries`, the record as `_read`
    gives it), if the file DuckDB opened is the one checked then, in the same state and with
    the same bytes (and the record's MAC holds); else None: check in full."""
    path, now = store_file(con), opened(con)
    if path is None or now is None or (entry := entries.get(path)) is None:
        return None
    found = _valid(entry, key)
    if found is None or found.state != now.state:
        return None
    if found.content != now.digest():
        return None  # the same state over other bytes: written through a shared map
    return found.checked_at


def record_checked(path: Path | str, key: SealKey, state: str | None, content: str) -> None:
    """Record that every seal of the store at `path` matched in file `state` with bytes of
    digest `content` (both taken from the file checked, before and after the check); only
    when the file at `path` is still in that state."""
    path = os.path.realpath(path)
    if state is None or file_state(path) != state:
        return
    ledger = record_file()
    entries = _read(ledger)
    found = Checked(path, state, content, time.time())
    entries.pop(path, None)
    entries[path] = {
        "path": path,
        "state": state,
        "content": content,
        "checked_at": found.checked_at,
        "mac": found.mac(key),
    }
    kept = list(entries.values())[-MAX_REMEMBERED:]
    partial = ledger.with_name(f".{ledger.name}.{os.getpid()}-{os.urandom(4).hex()}")
    try:
        ledger.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(entry) + "\n" for entry in kept)
        os.replace(partial, ledger)
    except OSError:
        partial.unlink(missing_ok=True)  # no record: the next read checks in full, as before


def check_seals_once(
    con: DuckDBPyConnection, max_examples: int = 10, *, full: bool = False
) -> SealCheck:
    """`seal.check_seals`, skipped when the file this store is read from is one whose every
    seal was recomputed and matched before, in the same state and with the same bytes (unless
    `full`); a check that passes records it, when the file was the same before and after."""
    path = store_file(con)
    key = load_key(create=False)
    if path is None or key is None:
        return check_seals(con, max_examples)
    entries = {} if full else _read(record_file())  # read once for both shortcuts
    if (when := _checked_at(con, key, entries)) is not None:
        # the same bytes as when every row's seal matched: not recomputed
        found, _ = armed_state(con, rows_matched=True)
        if found.state == "sealed":
            return SealCheck(found, 0, [], joined_strings([]), checked_at=when)
    before = opened(con)
    content = before.digest() if before is not None else None
    checked = content is not None and _statistics_passed(entries, content, key)
    result = check_seals(con, max_examples, statistics=not checked)
    if result.passed and before is not None and content is not None:
        after = opened(con)
        if after is not None and after == before and after.digest() == content:
            record_checked(path, key, before.state, content)
    return result
