"""Folders gymflow keeps things in for one user (the seal key and its records, compiled report
templates, the catalogs of run folders), used only when no one else can reach into them."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def private_folder(folder: Path, *, create: bool) -> bool:
    """True when `folder` is a real folder (not a link) owned by this user that no one else can
    read, write or enter; made (mode 0700, with its parents) first when `create`. Anything else
    is not to be used: another user could plant bytecode there."""
    if create:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return False
    try:
        info = folder.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def write_private(file: Path, text: str) -> None:
    """`text` as `file`, owner-only (0600), in a folder only this user can reach (made when
    absent): written aside under an unguessable name and renamed into place, so a reader finds
    the previous file or the new one whole. OSError when it cannot be (the folder is someone
    else's or open to others: PermissionError)."""
    if not private_folder(file.parent, create=True):
        raise PermissionError(errno.EACCES, "not a folder only this user can reach", file.parent)
    partial = file.with_name(f".{file.name}.{os.getpid()}-{os.urandom(4).hex()}")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, file)
    except OSError:
        partial.unlink(missing_ok=True)
        raise


def user_cache(name: str) -> Path:
    """`$XDG_CACHE_HOME/gymflow/NAME`, or `~/.cache/gymflow/NAME`. Raises RuntimeError when
    there is no home folder (HOME unset, no passwd entry): nowhere to cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gymflow" / name


def user_state(name: str) -> Path:
    """`$XDG_STATE_HOME/gymflow/NAME`, or `~/.local/state/gymflow/NAME`: what a user keeps
    between sessions that is not a cache (a served environment's access key)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gymflow" / name


def user_config(name: str) -> Path:
    """`$XDG_CONFIG_HOME/gymflow/NAME`, or `~/.config/gymflow/NAME` (the seal key, the records of
    sealed stores)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gymflow" / name
