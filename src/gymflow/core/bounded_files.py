"""The one reader of a file from a folder gymflow does not own (what a sandboxed agent left in
its logs, a file beside a run, an object of a shard root on this machine): opened without
following a link and without blocking, a regular file only, and never more than a bound read.

Read by path, such a file was a hole each time: `trajectory.json -> /dev/zero`, made by the
agent inside its sandbox, was read on the host until the run passed 2 GB (attack pass 7, s04);
a link to a host file would have put that file into a store meant to be shared; a FIFO is
waited on forever; a 1 GB sparse gate.json took 2.3 GB to find unsealed (attack pass 6, s20).
Here a link, a device, a FIFO, a socket or a file past the bound is a `FileBoundError` naming
the file and why, before anything is read."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from gymflow.core.errors import UserError

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class FileBoundError(UserError):
    """A file that is not read: a link, not a regular file, or longer than its bound."""

    def __init__(self, path: Path | str, why: str = "") -> None:
        # `why` optional: an exception is rebuilt from its message alone when unpickled
        super().__init__(f"{path}: {why}" if why else str(path))
        self.why = why or str(path)


class FileTooLong(FileBoundError):
    """A regular file longer than its bound."""


@contextmanager
def open_bounded(path: Path, limit: int, *, follow_links: bool = False) -> Generator[BinaryIO]:
    """`path` open for reading once it is known to be a regular file of at most `limit` bytes
    (a link is refused unless `follow_links`). OSError as `open` raises it (a missing file is
    FileNotFoundError). Reading past `limit` is the caller's to refuse: a file can grow."""
    flags = _FLAGS if follow_links else _FLAGS | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:  # the last part is a link
            raise FileBoundError(path, "a link; not followed, not read") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileBoundError(path, "not a regular file (a device, FIFO or socket); not read")
        if info.st_size > limit:
            raise FileTooLong(path, f"{info.st_size:,} bytes, past the {limit:,} read here")
        yield handle


def read_bounded(path: Path, limit: int, *, follow_links: bool = False) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (`open_bounded`); a file
    that grew past `limit` while read is refused the same way."""
    with open_bounded(path, limit, follow_links=follow_links) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLong(path, f"longer than the {limit:,} bytes read here")
    return data
