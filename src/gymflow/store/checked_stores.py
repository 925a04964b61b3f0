"""The seal checked once per store state: after every verdict's seal was recomputed and matched,
the store's file state is recorded beside the seal key, so a later read of the same state skips
the recompute (19 of health's 36 s at ten million rollouts) and says when it was checked.

A file's state is what Git's index compares to decide whether to hash a file again: device,
inode, size, modification and change time in nanoseconds, of the database and of its WAL (or
that it has none). Any write changes them, and a process cannot set a file's change time back
(`utimensat` sets the modification time; the change time is the kernel's, and moves then too),
so a store edited since its check never matches. A copy or a move to another path is another
inode or path: checked again.

The record (`checked-stores`, owner-only, beside the key file) holds one line per store path:
its state, when it was checked and a MAC of both under the seal key, so a line forged or
copied between paths by whoever can write that folder's files is not taken. `reverify
--check`, the regression gate and `gym eval health --verify-seals` always recompute."""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gymflow.store.seal import (
    SealCheck,
    SealKey,
    SealKeyError,
    armed_state,
    check_seals,
    key_file,
    load_key,
    store_file,
)

#: Stores remembered at most (the oldest checks are forgotten first).
MAX_REMEMBERED = 2000


def record_file() -> Path:
    return key_file().with_name("checked-stores")


def file_state(path: Path | str) -> str | None:
    """The store's file state (`path` and its WAL), as text; None when it is not a file."""
    parts = []
    for name in (str(path), f"{path}.wal"):
        try:
            info = os.stat(name)
        except FileNotFoundError:
            parts.append("-")
            continue
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        parts.append(
            f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
        )
    return "/".join(parts) if parts[0] != "-" else None


@dataclass(frozen=True, slots=True)
class Checked:
    """A store whose seals were all recomputed and matched in its present file state."""

    path: str
    state: str
    #: seconds since the epoch
    checked_at: float

    def mac(self, key: SealKey) -> str:
        return key.mac(f"gymflow checked store\n{self.path}\n{self.state}\n{self.checked_at!r}")


def _read(ledger: Path) -> dict[str, dict]:
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


def checked_at(path: Path | str, key: SealKey) -> float | None:
    """When the store at `path` had every seal checked, if its file state is still the one
    checked then (and the record's MAC holds); else None: check in full."""
    path = os.path.realpath(path)
    entry = _read(record_file()).get(path)
    state = file_state(path)
    if entry is None or state is None or entry.get("state") != state:
        return None
    try:
        found = Checked(path, state, float(entry["checked_at"]))
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(entry.get("mac"), str) or entry["mac"] != found.mac(key):
        return None
    return found.checked_at


def record_checked(path: Path | str, key: SealKey, state: str | None) -> None:
    """Record that every seal of the store at `path` matched in file `state` (taken before the
    check began: a state that moved during it is not recorded)."""
    path = os.path.realpath(path)
    if state is None or file_state(path) != state:
        return
    ledger = record_file()
    entries = _read(ledger)
    found = Checked(path, state, time.time())
    entries.pop(path, None)
    entries[path] = {
        "path": path,
        "state": state,
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


def check_seals_once(con, max_examples: int = 10, *, full: bool = False) -> SealCheck:
    """`seal.check_seals`, skipped when this store's file state is one whose every seal was
    recomputed and matched before (unless `full`); a check that passes records the state."""
    path = store_file(con)
    key = load_key(create=False)
    if path is None or key is None:
        return check_seals(con, max_examples)
    if not full and (when := checked_at(path, key)) is not None:
        found, _ = armed_state(con)
        if found.state == "sealed":
            none = pa.chunked_array([], pa.string()).combine_chunks()
            return SealCheck(found, 0, [], none, checked_at=when)
    state = file_state(path)
    result = check_seals(con, max_examples)
    if result.passed:
        record_checked(path, key, state)
    return result
